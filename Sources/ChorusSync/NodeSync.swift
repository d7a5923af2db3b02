import ChorusNode
import Logging

extension Node {
    /// Syncs both ways with the node serving at `host:port` over Noise-
    /// encrypted TCP and returns once both sides said the sync is complete
    /// (with `options.live`, once the connection ends; cancel the task to
    /// end it). The same as `SyncNetwork.sync(node, host:port:)`.
    public nonisolated func sync(with host: String, port: Int, options: SyncOptions = SyncOptions()) async throws -> SyncReport {
        try await SyncNetwork.sync(self, host: host, port: port, options: options)
    }

    /// Runs one sync session over a transport of the app's own: Multipeer
    /// Connectivity or a WebSocket on Apple platforms, an in-memory pair
    /// (`MemoryTransport.pair`) in tests. Any `FrameTransport` will do that
    /// delivers whole frames in order, both ways, and whose `peer.key` is the
    /// other node's device key as proved to this end (over TCP the Noise
    /// handshake proves it and encrypts, Specs/sync-transport.md; a custom
    /// transport must do both). Each end calls it with its end of the
    /// transport; it returns when both said the sync is complete (with
    /// `options.live`, when the transport closes).
    public nonisolated func sync(over transport: any FrameTransport, options: SyncOptions = SyncOptions()) async throws -> SyncReport {
        try await SyncSession(node: self, transport: transport, options: options, peers: try PeerStore(node: self)).run()
    }

    /// Serves sync to peers on `host:port` (port 0: a free one, see
    /// `Serving.port`) in the background until `shutdown()`, each session
    /// with `options` (live by default: a peer that asks for live mode stays
    /// connected; budgets per session, Specs/sync.md §5.1). Sessions are
    /// logged to `logger` (one structured line each; nothing by default).
    public nonisolated func serve(
        host: String = "127.0.0.1", port: Int, options: SyncOptions = SyncOptions(live: true), limits: ConnectionLimits = ConnectionLimits(),
        logger: Logger = Logger(label: "chorus.sync", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async throws -> Serving {
        let server = try SyncServer(node: self, options: options, logger: logger)
        do {
            let listener = try await server.listen(host: host, port: port, limits: limits)
            return Serving(server: server, listener: listener)
        } catch {
            await server.shutdown()
            throw error
        }
    }
}

/// A node serving sync (`Node.serve`): its port, and how to stop.
public struct Serving: Sendable {
    let server: SyncServer
    let listener: SecureListener

    /// The TCP port it listens on.
    public var port: Int { listener.port }

    /// Stops accepting connections and ends the sessions in progress.
    public func shutdown() async {
        await listener.shutdown()
        await server.shutdown()
    }
}
