import ChorusNoise
import Foundation
import Metrics
import NIOCore
import NIOPosix

/// Limits on a listener's connections (Specs/sync-transport.md §6a): file
/// descriptors are finite, and a client without the network key must not
/// be able to lock honest peers out by opening idle connections.
public struct ConnectionLimits: Sendable, Hashable {
    /// Open connections in all; a new one over it evicts the oldest one not
    /// yet authenticated, or is refused when every open one is.
    public var total: Int
    /// Connections still in their handshake; the oldest is evicted for a new one.
    public var unauthenticated: Int
    /// Connections still in their handshake from one remote address.
    public var unauthenticatedPerAddress: Int
    /// Authenticated connections from one remote address.
    public var perAddress: Int

    /// Limits with the defaults of Specs/sync-transport.md §6a. `total` nil
    /// means half the process's file-descriptor limit (between 16 and 4096).
    public init(total: Int? = nil, unauthenticated: Int = 128, unauthenticatedPerAddress: Int = 64, perAddress: Int = 64) {
        self.total = total ?? Self.defaultTotal()
        self.unauthenticated = unauthenticated
        self.unauthenticatedPerAddress = unauthenticatedPerAddress
        self.perAddress = perAddress
    }

    /// Half the process's file-descriptor limit (at most 4096), so the
    /// store, the log and outgoing syncs always have descriptors left.
    static func defaultTotal() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 512 }
        let soft = limit.rlim_cur > 1 << 20 ? 8192 : Int(limit.rlim_cur)
        return max(16, min(4096, soft / 2))
    }
}

/// Accepts encrypted connections on one address (Specs/sync-transport.md).
/// Each connection runs its handshake in its own task; only authenticated
/// connections reach `connections`. A slow or failing peer holds up no other,
/// and `ConnectionLimits` bound what idle or hostile clients can hold.
public final class SecureListener: Sendable {
    /// The host the listener was bound to, as passed to `bind`.
    public let host: String
    /// The bound port (the one picked by the system when asked for port 0).
    public let port: Int
    /// Authenticated connections, in the order their handshakes completed.
    /// Each waits here until taken; the connection limits bound how many
    /// can (`ConnectionLimits.total`).
    public let connections: AsyncStream<SecureConnection>

    private let serverChannel: any Channel
    private let children: ChildChannels
    private let acceptLoop: Task<Void, Never>

    private init(
        host: String, port: Int, connections: AsyncStream<SecureConnection>, serverChannel: any Channel,
        children: ChildChannels, acceptLoop: Task<Void, Never>
    ) {
        self.host = host
        self.port = port
        self.connections = connections
        self.serverChannel = serverChannel
        self.children = children
        self.acceptLoop = acceptLoop
    }

    /// Binds `host:port` (port 0 picks a free port) and starts accepting.
    /// `onFailure` hears about every connection that failed before it was
    /// authenticated: the peer's address and the error.
    public static func bind(
        host: String, port: Int, configuration: SecureConnectionConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, limits: ConnectionLimits = ConnectionLimits(),
        onFailure: (@Sendable (String, SecureConnectionError) -> Void)? = nil
    ) async throws -> SecureListener {
        let server: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
        do {
            server = try await ServerBootstrap(group: group)
                .serverChannelOption(ChannelOptions.backlog, value: 256)
                .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
                .bind(host: host, port: port) { child in
                    child.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(
                            wrappingChannelSynchronously: child, configuration: SecureConnectionCore.channelConfiguration)
                    }
                }
        } catch {
            throw SecureConnectionError.bindFailed("\(host):\(port): \(error)")
        }
        guard let boundPort = server.channel.localAddress?.port else {
            server.channel.close(promise: nil)
            throw SecureConnectionError.bindFailed("\(host):\(port): no local address")
        }
        // Unbounded: admission (`ChildChannels.admit`) already bounds the
        // connections. A smaller cap here closed authenticated peers without
        // a word when more handshakes completed at once than were taken.
        let (stream, continuation) = AsyncStream.makeStream(of: SecureConnection.self)
        let children = ChildChannels(limits: limits)
        let acceptLoop = Task {
            do {
                try await server.executeThenClose { inbound in
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await child in inbound {
                            let address = child.channel.remoteAddress?.ipAddress ?? "?"
                            guard let id = children.admit(child.channel, address: address) else {
                                // Every slot holds an authenticated peer: refuse at once.
                                child.channel.close(promise: nil)
                                onFailure?(address, .refusedAtCapacity)
                                continue
                            }
                            group.addTask {
                                await serve(
                                    child, configuration: configuration, continuation: continuation, onFailure: onFailure,
                                    onAuthenticated: { children.authenticated(id) })
                                children.remove(id)
                            }
                        }
                    }
                }
            } catch {
                // The server channel failed or was closed: stop accepting.
            }
            continuation.finish()
        }
        return SecureListener(
            host: host, port: boundPort, connections: stream, serverChannel: server.channel, children: children,
            acceptLoop: acceptLoop)
    }

    private static func serve(
        _ child: NIOAsyncChannel<ByteBuffer, ByteBuffer>, configuration: SecureConnectionConfiguration,
        continuation: AsyncStream<SecureConnection>.Continuation,
        onFailure: (@Sendable (String, SecureConnectionError) -> Void)?, onAuthenticated: @escaping @Sendable () -> Void
    ) async {
        let core = SecureConnectionCore(
            configuration: configuration, isInitiator: false, channel: child.channel,
            onEstablished: { connection in
                onAuthenticated()
                if case .terminated = continuation.yield(connection) {
                    // The listener shut down: refuse this one.
                    Task { await connection.close() }
                }
            })
        do {
            try await child.executeThenClose { inbound, outbound in
                await core.run(inbound: inbound, outbound: outbound)
            }
        } catch {
            await core.fail(.connectionLost)
        }
        if let error = await core.failureBeforeEstablished { onFailure?(core.address, error) }
    }

    /// Connections authenticated and still open, taken from `connections`
    /// or not.
    var authenticatedConnections: Int { children.authenticatedCount }

    /// Stops accepting, closes every connection this listener accepted, and
    /// waits for their tasks to end.
    public func shutdown() async {
        try? await serverChannel.close()
        for channel in children.all() { channel.close(promise: nil) }
        await acceptLoop.value
    }
}

/// The accepted channels still open: for shutdown, and to hold the
/// connection limits (oldest unauthenticated evicted first).
private final class ChildChannels: @unchecked Sendable {
    private struct Entry {
        let channel: any Channel
        let address: String
        var authenticated = false
    }
    private let lock = NSLock()
    private var channels: [Int: Entry] = [:]
    private var next = 0
    private let limits: ConnectionLimits

    init(limits: ConnectionLimits) { self.limits = limits }

    /// Admits a new connection, closing the oldest unauthenticated ones the
    /// limits require; nil when it cannot be admitted.
    func admit(_ channel: any Channel, address: String) -> Int? {
        var evict: [any Channel] = []
        let id: Int? = lock.withLock {
            func oldestUnauthenticated(from address: String? = nil) -> Int? {
                channels.filter { !$0.value.authenticated && (address == nil || $0.value.address == address) }.keys.min()
            }
            func evictOne(from address: String? = nil) -> Bool {
                guard let victim = oldestUnauthenticated(from: address), let entry = channels.removeValue(forKey: victim) else { return false }
                evict.append(entry.channel)
                return true
            }
            let fromAddress = channels.values.filter { $0.address == address }
            if fromAddress.filter(\.authenticated).count >= limits.perAddress { return nil }
            while channels.values.filter({ !$0.authenticated && $0.address == address }).count >= limits.unauthenticatedPerAddress {
                if !evictOne(from: address) { break }
            }
            while channels.values.filter({ !$0.authenticated }).count >= limits.unauthenticated {
                if !evictOne() { break }
            }
            while channels.count >= limits.total {
                if !evictOne() { return nil }
            }
            next += 1
            channels[next] = Entry(channel: channel, address: address)
            return next
        }
        for c in evict { c.close(promise: nil) }
        recordOpen()
        return id
    }

    /// Connections accepted and not yet closed (Specs/api.md §8).
    private static let open = Gauge(label: "chorus_sync_connections_open")

    private func recordOpen() {
        Self.open.record(lock.withLock { channels.count })
    }

    func authenticated(_ id: Int) {
        lock.withLock { channels[id]?.authenticated = true }
    }

    func remove(_ id: Int) {
        lock.withLock { _ = channels.removeValue(forKey: id) }
        recordOpen()
    }

    var authenticatedCount: Int { lock.withLock { channels.values.count(where: \.authenticated) } }

    func all() -> [any Channel] {
        lock.withLock { channels.values.map(\.channel) }
    }
}
