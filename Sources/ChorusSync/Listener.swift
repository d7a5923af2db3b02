import ChorusNoise
import Foundation
import NIOCore
import NIOPosix

/// Accepts encrypted connections on one address (Specs/sync-transport.md).
/// Each connection runs its handshake in its own task; only authenticated
/// connections reach `connections`. A slow or failing peer holds up no other.
public final class SecureListener: Sendable {
    public let host: String
    /// The bound port (the one picked by the system when asked for port 0).
    public let port: Int
    /// Authenticated connections, in the order their handshakes completed.
    public let connections: AsyncStream<SecureConnection>

    private let serverChannel: any Channel
    private let children: ChildChannels
    private let acceptLoop: Task<Void, Never>

    /// Connections whose handshakes are done but not yet taken from `connections`.
    public static let acceptedBacklog = 64

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
        host: String, port: Int, configuration: SecureTransportConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onFailure: (@Sendable (String, SecureChannelError) -> Void)? = nil
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
            throw SecureChannelError.bindFailed("\(host):\(port): \(error)")
        }
        guard let boundPort = server.channel.localAddress?.port else {
            server.channel.close(promise: nil)
            throw SecureChannelError.bindFailed("\(host):\(port): no local address")
        }
        let (stream, continuation) = AsyncStream.makeStream(
            of: SecureConnection.self, bufferingPolicy: .bufferingOldest(acceptedBacklog))
        let children = ChildChannels()
        let acceptLoop = Task {
            do {
                try await server.executeThenClose { inbound in
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await child in inbound {
                            let id = children.insert(child.channel)
                            group.addTask {
                                await serve(
                                    child, configuration: configuration, continuation: continuation, onFailure: onFailure)
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
        _ child: NIOAsyncChannel<ByteBuffer, ByteBuffer>, configuration: SecureTransportConfiguration,
        continuation: AsyncStream<SecureConnection>.Continuation,
        onFailure: (@Sendable (String, SecureChannelError) -> Void)?
    ) async {
        let core = SecureConnectionCore(
            configuration: configuration, isInitiator: false, channel: child.channel,
            onEstablished: { connection in
                if case .dropped = continuation.yield(connection) {
                    // Nobody is taking connections (or the listener shut down): refuse this one.
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

    /// Stops accepting, closes every connection this listener accepted, and
    /// waits for their tasks to end.
    public func shutdown() async {
        try? await serverChannel.close()
        for channel in children.all() { channel.close(promise: nil) }
        await acceptLoop.value
    }
}

/// The accepted channels still open, for shutdown.
private final class ChildChannels: @unchecked Sendable {
    private let lock = NSLock()
    private var channels: [Int: any Channel] = [:]
    private var next = 0

    func insert(_ channel: any Channel) -> Int {
        lock.lock()
        defer { lock.unlock() }
        next += 1
        channels[next] = channel
        return next
    }

    func remove(_ id: Int) {
        lock.lock()
        channels[id] = nil
        lock.unlock()
    }

    func all() -> [any Channel] {
        lock.lock()
        defer { lock.unlock() }
        return Array(channels.values)
    }
}
