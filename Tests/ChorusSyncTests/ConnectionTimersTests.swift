import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import ChorusSync

/// The connection's deadlines on an event loop whose clock the test moves
/// (`EmbeddedEventLoop`): what each one records and that it closes the
/// channel, with no wall-clock wait.
@Suite("Connection timers")
struct ConnectionTimersTests {
    final class Closes: Sendable {
        private let count = Mutex(0)
        func close() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    func timers() -> (ConnectionTimers, EmbeddedEventLoop, SecureFailureBox, Closes) {
        let loop = EmbeddedEventLoop()
        let failure = SecureFailureBox()
        let closes = Closes()
        return (ConnectionTimers(loop: loop, failure: failure, close: { closes.close() }), loop, failure, closes)
    }

    @Test("the idle deadline fires once its time has passed, records idle_timeout and closes; armed again, it keeps its first deadline")
    func idleDeadline() {
        var (timers, loop, failure, closes) = timers()
        timers.armIdle(.seconds(120))
        loop.advanceTime(by: .seconds(60))
        timers.armIdle(.seconds(120))  // already armed: still due at 120 s
        loop.advanceTime(by: .seconds(59))
        #expect(closes.value == 0 && failure.error == nil)
        loop.advanceTime(by: .seconds(1))
        #expect(closes.value == 1)
        #expect(failure.error == .idleTimeout)
    }

    @Test("data arriving cancels the idle deadline: nothing fires, and it can be armed anew")
    func idleCancelled() {
        var (timers, loop, failure, closes) = timers()
        timers.armIdle(.seconds(10))
        loop.advanceTime(by: .seconds(9))
        timers.cancelIdle()
        loop.advanceTime(by: .seconds(60))
        #expect(closes.value == 0 && failure.error == nil)
        timers.armIdle(.seconds(10))
        loop.advanceTime(by: .seconds(10))
        #expect(closes.value == 1 && failure.error == .idleTimeout)
    }

    @Test("the handshake deadline ends a handshake still running with handshake_timeout; one that completed first is left alone")
    func handshakeDeadline() {
        var (late, lateLoop, lateFailure, lateCloses) = timers()
        late.armHandshake(.seconds(10))
        lateLoop.advanceTime(by: .seconds(10))
        #expect(lateCloses.value == 1 && lateFailure.error == .handshakeTimeout)
        #expect(!lateFailure.completeHandshake())  // too late to be handed out

        var (inTime, loop, failure, closes) = timers()
        inTime.armHandshake(.seconds(10))
        #expect(failure.completeHandshake())
        inTime.cancelHandshake()
        loop.advanceTime(by: .seconds(60))
        #expect(closes.value == 0 && failure.error == nil)
    }

    @Test("a write's deadline closes a connection whose write made no progress, unless the write finished and cancelled it")
    func writeDeadline() {
        let (timers, loop, failure, closes) = timers()
        let finished = timers.deadline(.seconds(5))
        finished.cancel()
        let stuck = timers.deadline(.seconds(5))
        loop.advanceTime(by: .seconds(5))
        #expect(closes.value == 1 && failure.error == .idleTimeout)
        _ = stuck
    }

    @Test("the first error a connection records is the one it reports")
    func firstErrorWins() {
        var (timers, loop, failure, _) = timers()
        failure.set(.decryptionFailed)
        timers.armIdle(.seconds(1))
        loop.advanceTime(by: .seconds(1))
        #expect(failure.error == .decryptionFailed)
    }

    @Test("stopping every timer leaves nothing to fire")
    func stopAll() {
        var (timers, loop, failure, closes) = timers()
        timers.armHandshake(.seconds(1))
        timers.armIdle(.seconds(1))
        timers.startKeepalive(every: .seconds(3600)) { true }
        timers.stopAll()
        #expect(timers.handshake == nil && timers.idle == nil && timers.keepalive == nil)
        loop.advanceTime(by: .seconds(10))
        #expect(closes.value == 0 && failure.error == nil)
    }

    @Test("a keepalive is due once nothing was sent for its interval")
    func keepaliveDue() {
        let start = ContinuousClock.now
        #expect(!ConnectionTimers.keepaliveIsDue(lastSend: start, now: start + .seconds(39), interval: .seconds(40)))
        #expect(ConnectionTimers.keepaliveIsDue(lastSend: start, now: start + .seconds(40), interval: .seconds(40)))
    }

    @Test("the keepalive task ticks until its tick says stop", .timeLimit(.minutes(10)))
    func keepaliveTicks() async {
        // An async test resumes on other threads: its loop must be one that
        // may be used from any (an `EmbeddedEventLoop` may not).
        let loop = NIOAsyncTestingEventLoop()
        var timers = ConnectionTimers(loop: loop, failure: SecureFailureBox(), close: {})
        let ticks = Mutex(0)
        let stopped = AsyncStream<Void>.makeStream()
        timers.startKeepalive(every: .milliseconds(1)) {
            let n = ticks.withLock { $0 += 1; return $0 }
            if n == 3 { stopped.continuation.finish() }
            return n < 3
        }
        for await _ in stopped.stream {}
        await timers.keepalive?.value
        #expect(ticks.withLock { $0 } == 3)
        await loop.shutdownGracefully()
    }
}
