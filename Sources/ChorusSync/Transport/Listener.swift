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
    /// Authenticated connections from one remote address; nil (the default)
    /// caps them by `total` only, since many honest peers share one address
    /// behind a NAT.
    public var perAddress: Int?

    /// The limit a refused connection met.
    public enum Limit: Sendable, Hashable, CustomStringConvertible {
        /// `total` connections were open, every one authenticated.
        case total(Int)
        /// `perAddress` authenticated connections were open from the address.
        case perAddress(Int)

        /// The limit and the `chorus serve` option that raises it.
        public var description: String {
            switch self {
            case .total(let n): "all \(n) connections the listener allows are authenticated (chorus serve --max-connections)"
            case .perAddress(let n): "\(n) authenticated connections from this address, the per-address limit (chorus serve --max-per-address)"
            }
        }
    }

    /// Limits with the defaults of Specs/sync-transport.md §6a. `total` nil
    /// means half the process's file-descriptor limit (between 16 and 4096).
    public init(total: Int? = nil, unauthenticated: Int = 128, unauthenticatedPerAddress: Int = 64, perAddress: Int? = nil) {
        self.total = total ?? Self.defaultTotal()
        self.unauthenticated = unauthenticated
        self.unauthenticatedPerAddress = unauthenticatedPerAddress
        self.perAddress = perAddress
    }

    /// Half the process's file-descriptor limit (at most 4096), so the
    /// store, the log and outgoing syncs always have descriptors left.
    static func defaultTotal() -> Int { max(16, min(4096, maxTotal)) }

    /// The most `total` may be: half the process's descriptor limit.
    package static var maxTotal: Int { max(16, Descriptors.limit / 2) }

    /// These limits lowered to what the process's descriptors allow (`total`
    /// at most `maxTotal`, the handshake caps at most `total`), with one
    /// line for each value lowered. Above the descriptor limit `accept` would
    /// fail with `EMFILE` instead of the listener choosing whom to refuse.
    package func fittedToDescriptors() -> (limits: ConnectionLimits, lowered: [String]) {
        var fitted = self
        var lowered: [String] = []
        if total > Self.maxTotal {
            fitted.total = Self.maxTotal
            lowered.append("--max-connections \(total) lowered to \(fitted.total): the process may open \(Descriptors.limit) descriptors (ulimit -n)")
        }
        if unauthenticated > fitted.total {
            fitted.unauthenticated = fitted.total
            lowered.append("--max-unauthenticated \(unauthenticated) lowered to \(fitted.total), the connection limit")
        }
        fitted.unauthenticatedPerAddress = min(unauthenticatedPerAddress, fitted.unauthenticated)
        return (fitted, lowered)
    }
}

/// The process's file-descriptor limit, which every listener's connection
/// cap must fit in (Specs/sync-transport.md §6a).
package enum Descriptors {
    /// The soft `RLIMIT_NOFILE` (8192 when it reads as unlimited).
    package static var limit: Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        return limit.rlim_cur > 1 << 20 ? 8192 : Int(limit.rlim_cur)
    }

    /// Raises the soft limit to the hard one (at most 2^20), as a server
    /// that holds many connections should; returns the soft limit after.
    @discardableResult
    package static func raiseLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return Self.limit }
        let target = min(limit.rlim_max, 1 << 20)
        if limit.rlim_cur < target {
            limit.rlim_cur = target
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return Self.limit
    }
}

/// Accepts encrypted connections on one address (Specs/sync-transport.md).
/// Each connection runs its handshake in its own task; only authenticated
/// connections reach `connections`. A slow or failing peer holds up no other,
/// and `ConnectionLimits` bound what idle or hostile clients can hold.
package final class SecureListener: Sendable {
    /// The host the listener was bound to, as passed to `bind`.
    package let host: String
    /// The bound port (the one picked by the system when asked for port 0).
    package let port: Int
    /// Authenticated connections, in the order their handshakes completed.
    /// Each waits here until taken; the connection limits bound how many
    /// can (`ConnectionLimits.total`).
    package let connections: AsyncStream<SecureConnection>

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
    package static func bind(
        host: String, port: Int, configuration: SecureConnectionConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, limits: ConnectionLimits = ConnectionLimits(),
        onFailure: (@Sendable (String, SecureConnectionError) -> Void)? = nil
    ) async throws -> SecureListener {
        let server: NIOAsyncChannel<NIOAsyncChannel<ByteBuffer, ByteBuffer>, Never>
        do {
            server = try await TCPChannels.listen(host: host, port: port, group: group)
        } catch {
            throw SecureConnectionError.bindFailed("\(host):\(port): \(TCPChannels.reason(error, listening: true))")
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
                            let admission = children.admit(child.channel, address: address)
                            guard case .admitted(let id) = admission else {
                                // At the limits: refuse at once. The channel is closed through
                                // `executeThenClose`, which finishes its writer: an async channel
                                // dropped with an unfinished writer traps the whole process.
                                if case .refused(let limit) = admission { onFailure?(address, .refusedAtCapacity(limit)) }
                                group.addTask { try? await child.executeThenClose { _, _ in } }
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

    /// Test hook: the listening channel.
    var serverChannelForTesting: any Channel { serverChannel }

    /// Connections authenticated and still open, taken from `connections`
    /// or not.
    var authenticatedConnections: Int { children.authenticatedCount }

    /// Stops accepting, closes every connection this listener accepted, and
    /// waits for their tasks to end.
    package func shutdown() async {
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

    enum Admission {
        case admitted(Int)
        case refused(ConnectionLimits.Limit)
    }

    /// Admits a new connection, closing the oldest unauthenticated ones the
    /// limits require, or says which limit refuses it.
    func admit(_ channel: any Channel, address: String) -> Admission {
        var evict: [any Channel] = []
        let admission: Admission = lock.withLock {
            func oldestUnauthenticated(from address: String? = nil) -> Int? {
                channels.filter { !$0.value.authenticated && (address == nil || $0.value.address == address) }.keys.min()
            }
            func evictOne(from address: String? = nil) -> Bool {
                guard let victim = oldestUnauthenticated(from: address), let entry = channels.removeValue(forKey: victim) else { return false }
                evict.append(entry.channel)
                return true
            }
            if let perAddress = limits.perAddress,
                channels.values.count(where: { $0.authenticated && $0.address == address }) >= perAddress
            {
                return .refused(.perAddress(perAddress))
            }
            while channels.values.filter({ !$0.authenticated && $0.address == address }).count >= limits.unauthenticatedPerAddress {
                if !evictOne(from: address) { break }
            }
            while channels.values.filter({ !$0.authenticated }).count >= limits.unauthenticated {
                if !evictOne() { break }
            }
            while channels.count >= limits.total {
                if !evictOne() { return .refused(.total(limits.total)) }
            }
            next += 1
            channels[next] = Entry(channel: channel, address: address)
            return .admitted(next)
        }
        for c in evict { c.close(promise: nil) }
        recordOpen()
        return admission
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

/// Stops accepting for a second after `accept` fails for want of descriptors
/// or memory (Specs/sync-transport.md §6a). SwiftNIO's own back-off handler
/// only delays the next read request, but a failed accept leaves the read
/// pending and the socket registered, so the event loop would retry at once,
/// on a full core, until a descriptor is free. Turning `autoRead` off
/// unregisters the socket; turning it on again after the pause re-registers it.
final class AcceptPauseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    static let pause = TimeAmount.seconds(1)
    private static let paused = Counter(label: "chorus_sync_accept_paused_total")
    private var resume: Scheduled<Void>?

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? IOError, Self.isExhaustion(error.errnoCode), resume == nil {
            Self.paused.increment()
            let channel = context.channel
            try? channel.syncOptions?.setOption(.autoRead, value: false)
            resume = context.eventLoop.assumeIsolated().scheduleTask(in: Self.pause) { [self] in
                resume = nil
                try? channel.syncOptions?.setOption(.autoRead, value: true)
            }
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        resume?.cancel()
        resume = nil
        context.fireChannelInactive()
    }

    static func isExhaustion(_ code: Int32) -> Bool {
        code == EMFILE || code == ENFILE || code == ENOBUFS || code == ENOMEM
    }
}
