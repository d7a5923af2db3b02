import NIOCore
import NIOPosix

/// The TCP side of the encrypted transport, dialled and accepted alike: the
/// one place that sets up SwiftNIO channels, so both ends run on the same
/// channel options and back-pressure.
enum TCPChannels {
    typealias Connection = NIOAsyncChannel<ByteBuffer, ByteBuffer>

    /// Reads at most this many buffers ahead of the connection's reader.
    static let configuration = Connection.Configuration(backPressureStrategy: .init(lowWatermark: 2, highWatermark: 4))

    /// Connects to `host:port`, giving up after `timeout`.
    static func dial(host: String, port: Int, timeout: Duration, group: any EventLoopGroup) async throws -> Connection {
        try await ClientBootstrap(group: group)
            .connectTimeout(timeout.timeAmount)
            .connect(host: host, port: port, channelInitializer: asyncChannel)
    }

    /// Binds `host:port` (0: a free port) and yields each accepted
    /// connection. `AcceptPauseHandler` pauses accepting while the process
    /// is out of file descriptors.
    static func listen(host: String, port: Int, group: any EventLoopGroup) async throws -> NIOAsyncChannel<Connection, Never> {
        try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(AcceptPauseHandler()) }
            }
            .bind(host: host, port: port, childChannelInitializer: asyncChannel)
    }

    /// A new channel, dialled or accepted, as the async channel a
    /// connection runs on (frames are small and latency-bound, so no Nagle
    /// delay).
    private static func asyncChannel(_ channel: any Channel) -> EventLoopFuture<Connection> {
        channel.eventLoop.makeCompletedFuture {
            try channel.syncOptions?.setOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            return try Connection(wrappingChannelSynchronously: channel, configuration: configuration)
        }
    }
}
