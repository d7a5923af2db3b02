#if Service
import HummingbirdCore
import Logging
import NIOCore

/// A child channel that closes a connection whose first request head has
/// not arrived within `deadline` (Specs/api.md §2). The WebSocket upgrade
/// reads that head before any HTTP handler exists, so HTTP's own idle
/// timeout starts only after it: without this, a client could hold a
/// connection open for ever by sending half a request.
struct FirstRequestDeadline<Base: ServerChildChannel>: ServerChildChannel {
    let base: Base
    let deadline: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(FirstHeadTimer(deadline: deadline))
        }.flatMap { base.setup(channel: channel, logger: logger) }
    }

    func handle(value: Base.Value, logger: Logger) async { await base.handle(value: value, logger: logger) }
}

/// Closes the channel unless the bytes read hold the end of a request head
/// (an empty line) before the deadline, or when the server stops first;
/// then leaves the pipeline.
final class FirstHeadTimer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    let deadline: TimeAmount
    private var timer: Scheduled<Void>?
    /// The last bytes seen, so that an empty line split across reads is found.
    private var tail: [UInt8] = []

    init(deadline: TimeAmount) { self.deadline = deadline }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        timer = context.eventLoop.scheduleTask(in: deadline) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) { timer?.cancel() }

    /// The server is stopping: a connection whose first request has not
    /// arrived has nothing to finish, so it closes now rather than holding
    /// the shutdown until its deadline.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        var window = tail
        window.append(contentsOf: buffer.readableBytesView.suffix(4096))
        let found = window.count >= 4 && (0...(window.count - 4)).contains { window[$0...$0 + 3].elementsEqual([13, 10, 13, 10]) }
        tail = Array(window.suffix(3))
        context.fireChannelRead(data)
        if found {
            timer?.cancel()
            timer = nil
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }
}
#endif
