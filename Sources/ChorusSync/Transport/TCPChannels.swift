#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
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

    /// Why a dial or a bind failed, in plain words with what to do: NIO's
    /// errors print as nested structures with system call names.
    static func reason(_ error: any Error, listening: Bool = false) -> String {
        if let failure = error as? NIOConnectionError {
            if failure.dnsAError != nil || failure.dnsAAAAError != nil, failure.connectionErrors.isEmpty {
                return "cannot resolve the host name \(failure.host) (check its spelling, or give an IP address)"
            }
            if let first = failure.connectionErrors.first { return reason(first.error) }
        }
        if let io = error as? IOError {
            let text = String(cString: strerror(io.errnoCode)).lowercased()
            switch io.errnoCode {
            case ECONNREFUSED: return "\(text): nothing listens there (is the peer's node serving on that address and port?)"
            case EADDRINUSE: return "\(text): another process listens there (stop it, or choose another port)"
            case EADDRNOTAVAIL where listening: return "\(text): this machine has no such address (use one of its own, or 0.0.0.0)"
            case EACCES where listening: return "\(text): ports below 1024 need privileges (choose a port from 1024 up)"
            case ETIMEDOUT, EHOSTUNREACH, ENETUNREACH: return "\(text) (check the address and that the network reaches it)"
            default: return text
            }
        }
        if case ChannelError.connectTimeout(let limit) = error {
            return "no answer within \(limit.nanoseconds / 1_000_000_000) s (check the address and that the network reaches it)"
        }
        if let address = error as? SocketAddressError, case .failedToParseIPString(let text) = address {
            return "\(text) is not an IP address"
        }
        return "\(error)"
    }
}
