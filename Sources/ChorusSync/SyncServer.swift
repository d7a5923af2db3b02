import ChorusCrypto
import ChorusNode
import Foundation
import Logging
import Metrics
import Synchronization

/// Serves sync sessions for many peers at once on one node (`chorus
/// serve`). Each connection runs its own session; a peer that breaks the
/// protocol is disconnected and refused for `bans.duration`. It logs one
/// structured line per session start, end or error (peer, address, events,
/// bytes, seconds, outcome) and counts sessions, events and bytes
/// (Specs/api.md §8).
package final class SyncServer: Sendable {
    /// The node whose store is served.
    package let node: Node
    /// The peer records in the node's store, updated at the end of each
    /// session.
    package let peers: PeerStore
    /// Peers refused for a while after a session they broke.
    package let bans: BanList
    /// The options every session runs with (live mode offered by default).
    package let options: SyncOptions
    /// Receives one structured line per session start, end or error; discards
    /// them by default.
    package let logger: Logger
    /// Failures before authentication: an attacker causes them at will.
    let failureLog: RateLimitedLog
    private let active = Mutex<[Int: Task<Void, Never>]>([:])
    private let counter = Atomic<Int>(0)
    private let running = Mutex<[ObjectIdentifier: SyncSession]>([:])

    /// A server for `node` whose sessions run with `options` and refuse the
    /// peers in `bans`. Throws when the node's `peers` database cannot be
    /// opened.
    package init(
        node: Node, options: SyncOptions = SyncOptions(live: true), bans: BanList = BanList(),
        logger: Logger = Logger(label: "chorus.sync", factory: { _ in SwiftLogNoOpLogHandler() })
    ) throws {
        self.node = node
        self.peers = try PeerStore(node: node)
        self.bans = bans
        self.options = options
        self.logger = logger
        failureLog = RateLimitedLog(logger: logger, what: "connections that failed before authentication")
    }

    static func sessions(_ outcome: String) -> Counter { Counter(label: "chorus_sync_sessions_total", dimensions: [("outcome", outcome)]) }
    static let bytesIn = Counter(label: "chorus_sync_bytes_total", dimensions: [("direction", "in")])
    static let bytesOut = Counter(label: "chorus_sync_bytes_total", dimensions: [("direction", "out")])
    static let eventsIn = Counter(label: "chorus_sync_events_total", dimensions: [("direction", "received")])
    static let eventsOut = Counter(label: "chorus_sync_events_total", dimensions: [("direction", "sent")])
    static let unauthenticatedFailures = Counter(label: "chorus_sync_unauthenticated_failures_total")
    static let notHosted = Counter(label: "chorus_sync_events_total", dimensions: [("direction", "not_hosted")])

    /// Runs one session on `transport` to its end and returns its report
    /// (nil when it failed or the peer is refused).
    @discardableResult
    package func serve(_ transport: any FrameTransport) async -> SyncReport? {
        let peer = transport.peer
        var logger = self.logger
        logger[metadataKey: "peer"] = "\(peer.key.hex)"
        logger[metadataKey: "address"] = "\(peer.address)"
        if let reason = bans.refusal(peer.key) {
            logger.notice("session refused: the peer is banned: \(reason)", metadata: ["outcome": "refused"])
            Self.sessions("refused").increment()
            let frame = SyncMessage.error(code: "peer_refused", message: "refused for now: \(reason)").encoded()
            try? await transport.send(frame)
            await transport.close()
            return nil
        }
        logger.info("session start")
        do {
            let session = try SyncSession(node: node, transport: transport, options: options, peers: peers)
            let key = ObjectIdentifier(session)
            running.withLock { $0[key] = session }
            defer { _ = running.withLock { $0.removeValue(forKey: key) } }
            let r = try await session.run()
            let outcome = r.partial ? "partial" : "complete"
            logger.info(
                "session end",
                metadata: [
                    "outcome": "\(outcome)", "events_received": "\(r.eventsReceived)", "blobs_received": "\(r.blobsReceived)",
                    "events_sent": "\(r.eventsSent)", "blobs_sent": "\(r.blobsSent)", "bytes_in": "\(r.bytesReceived)",
                    "bytes_out": "\(r.bytesSent)", "seconds": "\(String(format: "%.3f", r.seconds))",
                    "not_hosted": "\(r.notHosted)", "inbox_kept": "\(r.deliveriesKept)",
                ])
            for hash in r.damagedBlobs {
                logger.error(
                    "blob \(hash.hex) is damaged in this store (its bytes no longer match their hash); answered as missing",
                    metadata: ["blob": "\(hash.hex)"])
            }
            Self.sessions(outcome).increment()
            Self.bytesIn.increment(by: r.bytesReceived)
            Self.bytesOut.increment(by: r.bytesSent)
            Self.eventsIn.increment(by: r.eventsReceived)
            if r.notHosted > 0 { Self.notHosted.increment(by: r.notHosted) }
            Self.eventsOut.increment(by: r.eventsSent)
            return r
        } catch let error as SyncError {
            if error.isPeerFault {
                bans.ban(peer.key, reason: error.code)
                logger.warning(
                    "session error: [\(error.code)] \(error); disconnected and refused for \(bans.duration)",
                    metadata: ["outcome": "banned", "code": "\(error.code)"])
                Self.sessions("banned").increment()
            } else {
                logger.warning("session error: [\(error.code)] \(error)", metadata: ["outcome": "error", "code": "\(error.code)"])
                Self.sessions("error").increment()
            }
        } catch {
            logger.warning("session error: \(error)", metadata: ["outcome": "error"])
            Self.sessions("error").increment()
        }
        return nil
    }

    /// Starts a session in the background (for a listener's accept loop).
    package func accept(_ transport: any FrameTransport) {
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
    package func shutdown() async {
        // What was suppressed is still reported.
        failureLog.flush()
        let tasks = active.withLock { a in
            let t = Array(a.values)
            a = [:]
            return t
        }
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
    }

    /// Sessions started with `accept(_:)` that have not ended yet.
    package var activeSessions: Int { active.withLock { $0.count } }

    /// The sessions running now (to watch their progress and queues).
    package var runningSessions: [SyncSession] { running.withLock { Array($0.values) } }
}
