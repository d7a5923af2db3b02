import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusNoise
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

@testable import ChorusSync

// MARK: helpers

/// `count` feeds of `perFeed` signed profile events each, with padded
/// payloads of about `padding` bytes.
func manyEvents(feeds count: Int, perFeed: Int, padding: Int = 200, seed: Int) throws -> [Event] {
    let base = UInt64(Date().timeIntervalSince1970 * 1000) - 1_000_000
    var out: [Event] = []
    for f in 0..<count {
        let key = SigningKey.generate()
        var prev: EventID? = nil
        for i in 1...perFeed {
            let text = "feed \(seed).\(f) event \(i) " + String(repeating: "x", count: padding)
            let e = try Event.sign(
                with: key, seq: UInt64(i), prev: prev, hlc: HLC(physicalMillis: base + UInt64(i), logical: 0), kind: .profileSet,
                object: key.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text(text))]))
            out.append(e)
            prev = e.id
        }
    }
    return out
}

/// The `chorus` executable built next to this test bundle.
func chorusExecutable() throws -> String {
    let argv0 = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var dir = argv0.deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent("chorus").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    throw SyncTestFailure("cannot find the chorus executable next to \(argv0.path)")
}

/// A `chorus` child process whose stderr is collected line by line.
final class ChorusProcess: @unchecked Sendable {
    let process = ChildProcess()
    let lines = LogLines()
    /// Set once stderr has reached its end and every line is in `lines`.
    private let drained = DrainedFlag()
    private let reader: Thread
    private let stdout = Pipe()

    /// `fileLimit` runs the command under `ulimit -n` (through /bin/sh).
    init(_ arguments: [String], fileLimit: Int? = nil) throws {
        if let fileLimit {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "ulimit -n \(fileLimit) && exec \"$0\" \"$@\"", try chorusExecutable()] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: try chorusExecutable())
            process.arguments = arguments
        }
        var env = ProcessInfo.processInfo.environment
        env["CHORUS_STORE"] = nil
        process.environment = env
        let err = Pipe()
        process.standardError = err
        process.standardOutput = stdout
        process.standardInput = FileHandle.nullDevice
        let lines = self.lines
        let drained = self.drained
        reader = Thread {
            var pending = Data()
            while true {
                let chunk = err.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let nl = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    lines.append(String(decoding: pending[pending.startIndex..<nl], as: UTF8.self))
                    pending.removeSubrange(pending.startIndex...nl)
                }
            }
            if !pending.isEmpty { lines.append(String(decoding: pending, as: UTF8.self)) }
            drained.set()
        }
        try process.run()
        reader.start()
    }

    /// `chorus serve` on `store`, once it listens: its port.
    static func serve(store: String, extra: [String] = [], fileLimit: Int? = nil) async throws -> (ChorusProcess, Int) {
        let p = try ChorusProcess(["serve", "--store", store, "--listen", "127.0.0.1:0"] + extra, fileLimit: fileLimit)
        var port: Int? = nil
        _ = try await eventually(.seconds(120)) {
            for line in p.lines.all {
                if let r = line.range(of: "listening on 127.0.0.1:") {
                    port = Int(line[r.upperBound...].prefix { $0.isNumber })
                }
            }
            return port != nil || !p.process.isRunning
        }
        guard let port else {
            p.kill()
            throw SyncTestFailure("chorus serve did not start: \(p.lines.all)")
        }
        return (p, port)
    }

    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }

    /// Waits (bounded) for the process to exit, and for its last stderr
    /// lines to be in `lines` (the reader may still hold them when the
    /// process is gone); SIGKILLs it after `limit`.
    @discardableResult
    func waitExit(_ limit: Duration = .seconds(120)) async throws -> Int32 {
        if !(try await eventually(limit) { !process.isRunning }) {
            kill()
            _ = try await eventually(.seconds(120)) { !process.isRunning }
            throw SyncTestFailure("chorus \(process.arguments ?? []) did not exit within \(limit); its last lines: \(lines.all.suffix(8))")
        }
        guard try await eventually(.seconds(120), { drained.isSet }) else {
            throw SyncTestFailure("chorus \(process.arguments ?? []) exited, but its stderr did not reach its end")
        }
        return process.terminationStatus
    }

    var output: String { String(decoding: stdout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
}

/// Whether a reader thread has reached the end of its pipe.
final class DrainedFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .sequentiallyConsistent) }
    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
}

/// Records the events of every data frame sent and which of them the peer
/// acknowledged (each `ack(n)` covers the n oldest unacknowledged data frames).
final class AckTracker: Sendable {
    private struct State {
        var inFlight: [[EventID]] = []
        var acked: [EventID] = []
        var ackedFrames = 0
        var fired = false
    }
    private let state = Mutex(State())
    let threshold: Int
    let action: @Sendable () -> Void

    init(killAfterAckedFrames threshold: Int, _ action: @escaping @Sendable () -> Void) {
        self.threshold = threshold
        self.action = action
    }

    func sent(_ frame: [UInt8]) {
        switch try? SyncMessage.decode(frame) {
        case .events(let envs): state.withLock { $0.inFlight.append(envs.compactMap { try? Event.decode($0).id }) }
        case .blobData, .blobMissing: state.withLock { $0.inFlight.append([]) }
        default: break
        }
    }

    func received(_ frame: [UInt8]) {
        guard case .ack(let n) = try? SyncMessage.decode(frame) else { return }
        let fire = state.withLock { s -> Bool in
            for _ in 0..<Int(min(n, UInt64(s.inFlight.count))) { s.acked += s.inFlight.removeFirst() }
            s.ackedFrames += Int(n)
            if s.ackedFrames >= threshold, !s.fired {
                s.fired = true
                return true
            }
            return false
        }
        if fire { action() }
    }

    var acknowledged: [EventID] { state.withLock { $0.acked } }
    var ackedFrames: Int { state.withLock { $0.ackedFrames } }
}

struct TrackingTransport: FrameTransport {
    let inner: any FrameTransport
    let tracker: AckTracker
    var peer: PeerIdentity { inner.peer }
    func send(_ frame: [UInt8]) async throws {
        tracker.sent(frame)
        try await inner.send(frame)
    }
    func receive() async throws -> [UInt8]? {
        let frame = try await inner.receive()
        if let frame { tracker.received(frame) }
        return frame
    }
    func close() async { await inner.close() }
}

func peerConfiguration(
    _ network: Bytes32, identity: SigningKey = .generate(), maxFrameSize: Int = SyncLimits.maxFrameBytes, idleTimeout: Duration = .seconds(60),
    handshakeTimeout: Duration = .seconds(10)
) -> SecureConnectionConfiguration {
    SecureConnectionConfiguration(
        networkKey: network, staticKey: .generate(), identity: identity, maxFrameSize: maxFrameSize, handshakeTimeout: handshakeTimeout,
        idleTimeout: idleTimeout)
}

// MARK: tests

@Suite("Sync fault tolerance", .closingNodes)
struct FaultTests {
    @Test("chorus serve killed with SIGKILL mid-sync keeps what it acknowledged; the next sync completes without duplicates")
    func sigkillMidSync() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let serverPath = dir.store("server")
        let clientPath = dir.store("client")
        do {
            let s = try await makeNode(dir, "server", network: net)
            #expect(await s.ingest(events: try manyEvents(feeds: 4, perFeed: 500, seed: 1)).accepted == 2000)
            await s.close()
        }
        var client = try await makeNode(dir, "client", network: net)
        let mine = try manyEvents(feeds: 16, perFeed: 750, seed: 2)
        #expect(await client.ingest(events: mine).accepted == mine.count)

        // First sync: the server process dies after acknowledging 3 batches.
        // A window of 4 frames keeps the server from holding more than a few
        // frames beyond those when the kill lands, however fast it commits
        // (with the default 128 frames all 24 could be stored by then).
        let (server, port) = try await ChorusProcess.serve(store: serverPath)
        let tracker = AckTracker(killAfterAckedFrames: 3) { server.kill() }
        let connection = try await SecureConnection.connect(
            host: "127.0.0.1", port: port, configuration: try SyncNetwork.configuration(for: client))
        var options = SyncOptions.patient
        options.window = 4
        let session = try SyncSession(
            node: client, transport: TrackingTransport(inner: connection, tracker: tracker), options: options,
            peers: try PeerStore(node: client))
        let first: Result<SyncReport, any Error> = try await bounded(.seconds(120), "first sync") {
            do { return .success(try await session.run()) } catch { return .failure(error) }
        }
        let status = try await server.waitExit()
        #expect(server.process.terminationReason == .uncaughtSignal && status == SIGKILL)
        if case .success = first { Issue.record("the sync completed although the server was killed") }
        let acknowledged = tracker.acknowledged
        #expect(tracker.ackedFrames >= 3 && !acknowledged.isEmpty)

        // The killed node opens intact and holds everything it acknowledged.
        var reopened = opened(try await Node.open(at: serverPath))
        #expect(try reopened.log.integrityProblems().isEmpty)
        let missingAcked = try acknowledged.filter { try reopened.event($0) == nil }
        #expect(missingAcked.isEmpty, "\(missingAcked.count) acknowledged events lost")
        let mineIDs = Set(mine.map(\.id))
        let held = try mine.count { try reopened.event($0.id) != nil }
        #expect(held >= acknowledged.count { mineIDs.contains($0) } && held < mine.count, "held \(held) of \(mine.count)")
        // What each side lacks, to check the second sync moves exactly that.
        func lacking(_ from: Node, _ to: Node) throws -> Int {
            try from.heads().reduce(0) { sum, h in
                let there = try to.head(of: h.author)?.seq ?? 0
                return sum + (h.head.seq > there ? Int(h.head.seq - there) : 0)
            }
        }
        let serverLacks = try lacking(client, reopened)
        let clientLacks = try lacking(reopened, client)
        await reopened.close()
        await client.close()

        // Second sync, both sides as processes: complete, no duplicates.
        let (server2, port2) = try await ChorusProcess.serve(store: serverPath)
        let sync = try ChorusProcess(["sync", "127.0.0.1:\(port2)", "--store", clientPath, "--json"])
        let syncStatus = try await sync.waitExit(.seconds(120))
        let output = sync.output
        #expect(syncStatus == 0, "\(sync.lines.all)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any], "\(output)")
        #expect(json["complete"] as? Bool == true)
        #expect(json["duplicates_received"] as? Int == 0)
        #expect(json["events_sent"] as? Int == serverLacks)
        #expect(json["events_received"] as? Int == clientLacks)
        // The interrupted first sync left no remembered position: this one reconciles.
        #expect(json["partial"] as? Bool == false && json["sessions"] as? Int == 1 && json["reconciled"] as? Bool == true)
        server2.process.terminate()
        #expect(try await server2.waitExit() == 0)
        #expect(server2.lines.all.contains { $0.contains("session end") })

        reopened = opened(try await Node.open(at: serverPath))
        client = opened(try await Node.open(at: clientPath))
        #expect(try feedHeads(reopened) == feedHeads(client))
        #expect(try digest(reopened) == digest(client))
        #expect(try reopened.log.integrityProblems().isEmpty && client.log.integrityProblems().isEmpty)
        await reopened.close()
        await client.close()
    }

    @Test("a peer that stops reading hits the idle timeout with a bounded queue while another peer syncs to completion")
    func stalledReader() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let node = try await makeNode(dir, "server", network: net)
        let events = try manyEvents(feeds: 8, perFeed: 500, padding: 900, seed: 3)  // about 4 MB
        #expect(await node.ingest(events: events).accepted == events.count)
        var options = SyncOptions.patient(live: true)
        // Applies to the honest session too: long enough that a loaded
        // machine (the whole suite runs in parallel) never idles it out.
        options.idleTimeout = .seconds(20)
        let lines = LogLines()
        let server = try SyncServer(node: node, options: options, logger: collectingLogger(lines))
        let listener = try await server.listen(host: "127.0.0.1", port: 0)

        // The stalled peer: hello, nothing to announce, a request for everything, then it never reads.
        let stalledKey = SigningKey.generate()
        let stalled = try await bounded(.seconds(120), "connect") {
            try await SecureConnection.connect(
                host: "127.0.0.1", port: listener.port, configuration: peerConfiguration(net.networkKey, identity: stalledKey))
        }
        let authors = Set(events.map(\.author)).sorted()
        try await stalled.send(SyncMessage.hello(SyncHello(user: Random.bytes32(), capabilities: [], hops: nil, since: 0)).encoded())
        try await stalled.send(SyncMessage.haveEnd(position: 0).encoded())
        try await stalled.send(SyncMessage.want(authors.map { FeedRange(author: $0, from: 1, prev: nil, to: 500) }).encoded())
        try await stalled.send(SyncMessage.wantEnd.encoded())

        // Meanwhile an honest peer syncs everything.
        let honest = try await makeNode(dir, "honest", network: net)
        let peak = Mutex(0)
        let watcher = Task {
            while !Task.isCancelled {
                for s in server.runningSessions {
                    let p = await s.peakOutboxBytes
                    peak.withLock { $0 = max($0, p) }
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        let report = try await bounded(.seconds(120), "honest sync") {
            try await SyncNetwork.sync(honest, host: "127.0.0.1", port: listener.port, options: .patient)
        }
        #expect(report.complete && report.eventsReceived >= events.count)
        #expect(try digest(honest) == digest(node))

        // The stalled session ends with idle_timeout; the peer is not banned.
        #expect(try await eventually(.seconds(120)) { lines.all.contains { $0.contains("[idle_timeout]") } }, "\(lines.all)")
        #expect(server.bans.refusal(stalledKey.publicKey) == nil)
        watcher.cancel()
        await watcher.value
        // Bounded: the outbox cap (2 MiB, then a frame of at most 256 KiB) plus small messages, never the 5 MB requested.
        let worst = peak.withLock { $0 }
        #expect(worst > 0 && worst < 3 << 20, "peak queued bytes \(worst)")
        #expect(try await eventually(.seconds(120)) { server.activeSessions == 0 })
        await stalled.close()
        await listener.shutdown()
        await server.shutdown()
        await honest.close()
        await node.close()
    }

    @Test("hostile peers (silent, oversized frame, random bytes after the handshake) never stall two honest peers syncing through the server")
    func hostilePeersDoNotStallOthers() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let node = try await makeNode(dir, "server", network: net)
        var options = SyncOptions(live: true)
        options.helloTimeout = .seconds(120)
        options.idleTimeout = .seconds(120)
        let lines = LogLines()
        let server = try SyncServer(node: node, options: options, logger: collectingLogger(lines))
        // A loaded machine (the whole suite on two cores) can take
        // seconds over a handshake; this test is about the sessions after it.
        let listener = try await server.listen(host: "127.0.0.1", port: 0, handshakeTimeout: .seconds(60))
        let port = listener.port

        // A silent peer: handshake done, then nothing at all (holds its session open).
        let silentKey = SigningKey.generate()
        let silent = try await bounded(.seconds(120), "connect") {
            try await SecureConnection.connect(
                // The server's transport timeout: each side's keepalive (a third of
                // its own) then comes well within the other's, however late a
                // loaded machine runs the keepalive task.
                host: "127.0.0.1", port: port, configuration: peerConfiguration(net.networkKey, identity: silentKey, idleTimeout: .seconds(120), handshakeTimeout: .seconds(60)))
        }
        // Its session is running before anything else starts: on a loaded
        // machine the server's side of the handshake can otherwise still be
        // pending (and under its 10 s handshake timeout) when the checks run.
        #expect(try await eventually(.seconds(120)) { server.activeSessions == 1 }, "the silent peer's session never started: \(lines.all)")
        // An oversized frame after the hello (the sender's own limit allows it, the server's does not).
        let bigKey = SigningKey.generate()
        let big = try await bounded(.seconds(120), "connect") {
            try await SecureConnection.connect(
                host: "127.0.0.1", port: port, configuration: peerConfiguration(net.networkKey, identity: bigKey, maxFrameSize: 4 << 20))
        }
        // (The server may cut the connection while the frame is still going out.)
        try? await big.send(SyncMessage.hello(SyncHello(user: Random.bytes32(), capabilities: [], hops: nil, since: 0)).encoded())
        try? await big.send([UInt8](repeating: 0x41, count: 2 << 20))
        // Random bytes on the socket after the handshake and the hello.
        let garbageKey = SigningKey.generate()
        let garbage = try await bounded(.seconds(120), "connect") {
            try await SecureConnection.connect(
                host: "127.0.0.1", port: port, configuration: peerConfiguration(net.networkKey, identity: garbageKey))
        }
        try? await garbage.send(SyncMessage.hello(SyncHello(user: Random.bytes32(), capabilities: [], hops: nil, since: 0)).encoded())
        try? await garbage.sendRawForTesting([0, 200] + Random.bytes(200))

        // Two honest peers sync through the server meanwhile.
        let p1 = try await makeNode(dir, "p1", network: net)
        let p2 = try await makeNode(dir, "p2", network: net)
        #expect(await p1.ingest(events: try manyEvents(feeds: 3, perFeed: 300, seed: 4)).accepted == 900)
        _ = try await p1.addPicture(pictureBytes(9, size: 100_000), mime: "image/png").object
        #expect(await p2.ingest(events: try manyEvents(feeds: 2, perFeed: 300, seed: 5)).accepted == 600)
        let started = ContinuousClock.now
        try await bounded(.seconds(120), "honest syncs") {
            async let r1 = SyncNetwork.sync(p1, host: "127.0.0.1", port: port, options: .patient)
            async let r2 = SyncNetwork.sync(p2, host: "127.0.0.1", port: port, options: .patient)
            let (a, b) = try await (r1, r2)
            #expect(a.complete && b.complete)
            let again1 = try await SyncNetwork.sync(p1, host: "127.0.0.1", port: port, options: .patient)
            let again2 = try await SyncNetwork.sync(p2, host: "127.0.0.1", port: port, options: .patient)
            #expect(again1.complete && again2.complete)
        }
        let honestTime = ContinuousClock.now - started
        #expect(try feedHeads(p1) == feedHeads(node) && feedHeads(p2) == feedHeads(node))
        #expect(try digest(p1) == digest(node) && digest(p2) == digest(node))
        #expect(try p2.blobs.read(Blake2b.hash256(pictureBytes(9, size: 100_000))) != nil)
        // The silent peer is still connected: nobody waited for it.
        #expect(server.activeSessions >= 1, "honest syncs took \(honestTime); server log: \(lines.all)")

        // The hostile peers were cut, logged with their codes, and refused.
        #expect(
            try await eventually(.seconds(120)) {
                let all = lines.all
                return all.contains { $0.contains("[frame_too_large]") } && all.contains { $0.contains("[malformed_message]") }
            }, "\(lines.all)")
        #expect(server.bans.refusal(bigKey.publicKey) != nil && server.bans.refusal(garbageKey.publicKey) != nil)
        #expect(server.bans.refusal(silentKey.publicKey) == nil)
        #expect(try node.log.integrityProblems().isEmpty)
        await silent.close()
        await big.close()
        await garbage.close()
        await listener.shutdown()
        await server.shutdown()
        await p1.close()
        await p2.close()
        await node.close()
    }
}
