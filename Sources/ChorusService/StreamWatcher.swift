#if Service
import NIOCore

/// A server-sent-events watcher (`/v1/watch`, Specs/api.md §6) written to
/// on its connection's event loop. A commit's answer reaches every watcher
/// of a loop in one hop to that loop, and each watcher costs one write of
/// the answer's chunk, framed once for all (`WatchHub.Answer.chunk`), into
/// its socket: no task woken per watcher, no async writer and no HTTP
/// encoding per watcher.
///
/// The chunks go beneath the HTTP handlers, through a handler next to the
/// socket that also follows the channel's writability. That is sound
/// because the response is chunked (an HTTP/1.1 head without a length) and
/// its head was written before this watcher exists; its end goes through
/// the HTTP encoder only after `finish`, after which nothing is written here.
/// Every field is touched only on `loop`.
final class StreamWatcher: @unchecked Sendable {
    let loop: any EventLoop
    private let channel: any Channel
    /// The answer id the client holds (`Last-Event-ID`): the first answer is not sent again when it is that one.
    private let held: String?
    private var first = true
    /// The newest chunk the socket could not take yet (a slow reader skips answers, never falls behind).
    private var pending: ByteBuffer?
    private var stopped = false
    private let ended: EventLoopPromise<Void>
    private var socket: SocketSide?

    private init(channel: any Channel, held: String?) {
        self.channel = channel
        loop = channel.eventLoop
        self.held = held
        ended = channel.eventLoop.makePromise()
    }

    /// A watcher of `channel`'s response, set up on its loop (so after the
    /// response head): it follows the channel's writability and closing.
    static func start(on channel: any Channel, held: String?) async throws -> StreamWatcher {
        try await channel.eventLoop.submit {
            let watcher = StreamWatcher(channel: channel, held: held)
            let socket = SocketSide(watcher)
            try channel.pipeline.syncOperations.addHandler(socket, position: .first)
            watcher.socket = socket
            channel.closeFuture.whenComplete { _ in watcher.stop() }
            return watcher
        }.get()
    }

    /// Until the watch ends: the client went away, the query ended, or `end` was called.
    func done() async { try? await ended.futureResult.get() }

    /// Ends the watch from any thread; deliveries after it write nothing.
    func end() { loop.execute { self.stop() } }

    /// Ends the watch and waits until it ended on the loop: after this,
    /// nothing more is written here, and the response may end.
    func finish() async { try? await loop.submit { self.stop() }.get() }

    /// On the loop.
    private func stop() {
        guard !stopped else { return }
        stopped = true
        pending = nil
        if let socket {
            self.socket = nil
            channel.pipeline.syncOperations.removeHandler(socket, promise: nil)
        }
        ended.succeed()
    }

    /// On the loop: a new answer.
    func deliver(_ answer: WatchHub.Answer) {
        guard !stopped else { return }
        if first {
            first = false
            if answer.id == held { return }
        }
        send(answer.chunk)
    }

    /// On the loop: a heartbeat, unless an answer waits (writing one is how a client that went away is noticed).
    func beat() {
        guard !stopped, pending == nil else { return }
        send(Self.heartbeatChunk)
    }

    static let heartbeatChunk = WatchHub.Answer.chunk(APIServer.watchHeartbeatComment)

    private func send(_ chunk: ByteBuffer) {
        guard let socket else { return }
        if channel.isWritable {
            socket.write(chunk)
        } else {
            pending = chunk
        }
    }

    /// On the loop: the socket takes writes again.
    fileprivate func writable() {
        guard !stopped, channel.isWritable, let chunk = pending, let socket else { return }
        pending = nil
        socket.write(chunk)
    }

    /// The handler next to the socket: writes chunks straight to it, and
    /// tells the watcher when the channel's writability changes. Passes
    /// everything else on.
    private final class SocketSide: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = Any
        private let watcher: StreamWatcher
        private var context: ChannelHandlerContext?

        init(_ watcher: StreamWatcher) { self.watcher = watcher }

        func handlerAdded(context: ChannelHandlerContext) { self.context = context }
        func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

        func write(_ chunk: ByteBuffer) {
            context?.writeAndFlush(NIOAny(chunk), promise: nil)
        }

        func channelWritabilityChanged(context: ChannelHandlerContext) {
            context.fireChannelWritabilityChanged()
            watcher.writable()
        }
    }
}
#endif
