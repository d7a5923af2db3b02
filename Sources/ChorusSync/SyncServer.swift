import ChorusCrypto
import ChorusNode
import Foundation
import Synchronization

/// Serves sync sessions for many peers at once on one node (`chorus
/// serve`). Each connection runs its own session; a peer that breaks the
/// protocol is disconnected and refused for `bans.duration`. Logging is
/// one line per session start, end or error.
public final class SyncServer: Sendable {
    public let node: Node
    public let peers: PeerStore
    public let bans: BanList
    public let options: SyncOptions
    private let log: @Sendable (String) -> Void
    /// The log line sink given at init.
    public var logLine: @Sendable (String) -> Void { log }
    private let active = Mutex<[Int: Task<Void, Never>]>([:])
    private let counter = Atomic<Int>(0)
    private let running = Mutex<[ObjectIdentifier: SyncSession]>([:])

    public init(
        node: Node, options: SyncOptions = SyncOptions(live: true), bans: BanList = BanList(),
        log: @escaping @Sendable (String) -> Void = { _ in }
    ) throws {
        self.node = node
        self.peers = try PeerStore(env: node.log.env)
        self.bans = bans
        self.options = options
        self.log = log
    }

    /// Runs one session on `transport` to its end and returns its report
    /// (nil when it failed or the peer is refused).
    @discardableResult
    public func serve(_ transport: any FrameTransport) async -> SyncReport? {
        let peer = transport.peer
        let who = "\(peer.key.short) (\(peer.address))"
        if let reason = bans.refusal(peer.key) {
            log("session refused: peer \(who) is banned: \(reason)")
            let frame = SyncMessage.error(code: "peer_refused", message: "refused for now: \(reason)").encoded()
            try? await transport.send(frame)
            await transport.close()
            return nil
        }
        log("session start: peer \(who)")
        do {
            let session = try SyncSession(node: node, transport: transport, options: options, peers: peers)
            let key = ObjectIdentifier(session)
            running.withLock { $0[key] = session }
            defer { _ = running.withLock { $0.removeValue(forKey: key) } }
            let r = try await session.run()
            log(
                "session end: peer \(who): received \(r.eventsReceived) events, \(r.blobsReceived) blobs; sent \(r.eventsSent) events, \(r.blobsSent) blobs; \(r.bytesReceived + r.bytesSent) bytes in \(String(format: "%.3f", r.seconds)) s"
            )
            return r
        } catch let error as SyncError {
            if error.isPeerFault {
                bans.ban(peer.key, reason: error.code)
                log("session error: peer \(who) disconnected and refused for \(bans.duration): [\(error.code)] \(error)")
            } else {
                log("session error: peer \(who): [\(error.code)] \(error)")
            }
        } catch {
            log("session error: peer \(who): \(error)")
        }
        return nil
    }

    /// Starts a session in the background (for a listener's accept loop).
    public func accept(_ transport: any FrameTransport) {
        let id = counter.wrappingAdd(1, ordering: .relaxed).newValue
        // Inserted under the lock that the task's removal also takes, so a
        // session that ends at once is never left behind in the table.
        active.withLock { a in
            a[id] = Task { [self] in
                await serve(transport)
                _ = active.withLock { $0.removeValue(forKey: id) }
            }
        }
    }

    /// Ends every running session (closing their connections) and waits for
    /// them. Acknowledged events are durable already: each ack follows the
    /// group commit that stored the batch.
    public func shutdown() async {
        let tasks = active.withLock { a in
            let t = Array(a.values)
            a = [:]
            return t
        }
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
    }

    public var activeSessions: Int { active.withLock { $0.count } }

    /// The sessions running now (to watch their progress and queues).
    public var runningSessions: [SyncSession] { running.withLock { Array($0.values) } }
}
