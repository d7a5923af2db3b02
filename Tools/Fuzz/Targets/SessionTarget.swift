import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation
import Synchronization

/// A served node meeting a peer that sends whatever the input says
/// (Specs/sync.md): the input's first byte picks the server's options (live,
/// blobs, reconciliation, sketches, inbox, listed hosting, directory, scope),
/// the rest is the peer's frames, each after a 3-byte big-endian length. The node's server runs the session to its end while the
/// peer reads what it answers; once the peer has sent everything and closed,
/// the session must end, and the node must still serve and write. One node
/// serves every input of a run, so what one input stored the next meets.
final class SessionFuzzing: Sendable {
    /// The node a run serves: a user with a profile, a picture with its
    /// bytes, a chat with a message and a follow.
    let node: Node
    let network: NetworkConfig
    let directory: URL

    static let shared: SessionFuzzing = {
        do { return try wait { try await SessionFuzzing() } } catch { fatalError("session fuzzing: cannot make the served node: \(error)") }
    }()

    init() async throws {
        directory = FuzzStores.directory("session")
        (node, network) = try await Node.createNetwork(at: directory.appendingPathComponent("served"), deviceName: "served")
        try await Self.populate(node, seed: 1)
    }

    static func populate(_ node: Node, seed: UInt8) async throws {
        _ = try await node.setProfile(.name("fuzz \(seed)"))
        let picture = try await node.addPicture(Data([0xFF, 0xD8, 0xFF, 0xE0] + [UInt8](repeating: seed, count: 300)), caption: "p").object
        let chat = try await node.createChat(title: "chat \(seed)").object
        _ = try await node.sendMessage(chat, text: "hello \(seed)", picture: picture)
        _ = try await node.follow(UserID(Bytes32([UInt8](repeating: seed, count: 32)) ?? .zero))
    }

    /// Runs one input.
    func run(_ data: [UInt8]) {
        guard let first = data.first else { return }
        let frames = Self.frames(Array(data.dropFirst()))
        let options = Self.options(first)
        let node = self.node
        let outcome: String?
        do {
            outcome = try Self.wait {
            // A server per input: a peer that broke the protocol is banned
            // from the server that saw it, and the next input is a new peer.
            let server = try SyncServer(node: node, options: options)
            let peerKey = Bytes32([UInt8](repeating: 0xfe, count: 32)) ?? .zero
            let (served, peer) = MemoryTransport.pair(node.identity.device.raw, peerKey, capacity: 4)
            let session = Task { await server.serve(served) }
            // The peer reads everything the node answers, so the node never
            // waits on a full queue, while it sends its frames, then closes.
            let reader = Task { while (try? await peer.receive()) != nil {} }
            for frame in frames { try? await peer.send(frame) }
            await peer.close()
            // Closed by the peer, the session must end; a hang is a defect.
            let ended = try await Self.within(.seconds(30)) { _ = await session.value }
            reader.cancel()
            guard ended else { return "the served session did not end within 30 s of the peer closing" }
            // The node still writes and reads.
            let mutation = try await node.setProfile(.bio("after \(frames.count) frames"))
            return mutation.isApplied ? nil : "the node refused its own write after a session"
            }
        } catch {
            outcome = "the node failed after a session: \(error)"
        }
        if let outcome { violated(outcome) }
    }

    /// The server's options as the bits of `byte` choose them.
    static func options(_ byte: UInt8) -> SyncOptions {
        var options = SyncOptions(live: byte & 1 != 0)
        options.blobs = byte & 2 == 0
        options.reconcile = byte & 4 == 0
        options.sketch = byte & 8 == 0
        options.inbox = byte & 16 != 0
        options.hostsListed = byte & 32 != 0
        options.directory = byte & 64 != 0
        if byte & 128 != 0 { options.scope = ReplicationScope(hops: 1) }
        return options
    }

    /// The frames of an input: each a 3-byte big-endian length and its bytes
    /// (a cut last frame is sent as it is).
    static func frames(_ data: [UInt8]) -> [[UInt8]] {
        var frames: [[UInt8]] = []
        var i = 0
        while i + 3 <= data.count {
            let length = Int(data[i]) << 16 | Int(data[i + 1]) << 8 | Int(data[i + 2])
            let end = min(data.count, i + 3 + length)
            frames.append(Array(data[(i + 3)..<end]))
            i = end
        }
        return frames
    }

    /// Inputs from real sessions: the frames another node of the network sent
    /// while syncing with the served node, with and without new data.
    func seeds() -> [[UInt8]] {
        (try? Self.wait { [self] in
            var seeds: [[UInt8]] = []
            for (index, populate) in [false, true].enumerated() {
                let other = try await Node.create(
                    at: directory.appendingPathComponent("seed-\(index)-\(UUID().uuidString)"), deviceName: "peer", network: network)
                if populate { try await Self.populate(other, seed: 2) }
                let server = try SyncServer(node: node, options: SyncOptions(live: false))
                let (served, peer) = MemoryTransport.pair(node.identity.device.raw, other.identity.device.raw, capacity: 64)
                let recording = RecordingTransport(peer)
                async let report = server.serve(served)
                _ = try await SyncSession(node: other, transport: recording, options: SyncOptions(live: false)).run()
                _ = await report
                await other.close()
                let frames = recording.sent.withLock { $0 }.flatMap { Self.bigEndian24($0.count) + $0 }
                // As a plain peer, and as a relay's (inbox, listed hosting, directory).
                seeds += [[0] + frames, [0b0111_0000] + frames]
            }
            return seeds
        }) ?? []
    }

    static func bigEndian24(_ n: Int) -> [UInt8] { [UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)] }

    /// Whether `body` finished within `limit`.
    static func within(_ limit: Duration, _ body: @escaping @Sendable () async -> Void) async throws -> Bool {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { await body(); return true }
            group.addTask { try await Task.sleep(for: limit); return false }
            let first = try await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    /// Runs `body` to its end from synchronous code (libFuzzer's callback).
    static func wait<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let r: Result<T, any Error>
            do { r = .success(try await body()) } catch { r = .failure(error) }
            result.withLock { $0 = r }
            done.signal()
        }
        done.wait()
        guard let r = result.withLock({ $0 }) else { fatalError("unreachable: the task signalled without a result") }
        return try r.get()
    }
}

/// A transport that keeps a copy of every frame it sends.
final class RecordingTransport: FrameTransport {
    let inner: MemoryTransport
    let sent = Mutex<[[UInt8]]>([])
    init(_ inner: MemoryTransport) { self.inner = inner }
    var peer: PeerIdentity { inner.peer }
    func send(_ frame: [UInt8]) async throws {
        sent.withLock { $0.append(frame) }
        try await inner.send(frame)
    }
    func receive() async throws -> [UInt8]? { try await inner.receive() }
    func close() async { await inner.close() }
}
