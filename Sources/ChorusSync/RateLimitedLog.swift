import Foundation
import Logging
import Synchronization

/// A log for events an attacker can cause at will (connections that fail
/// before authentication): at most `limit` lines per `window`; the lines
/// beyond are counted and reported in one line when the window ends, so a
/// flood costs a few lines, not one per connection.
final class RateLimitedLog: Sendable {
    private struct State {
        var windowStart: ContinuousClock.Instant
        var logged = 0
        var suppressed = 0
        var flushScheduled = false
    }

    private let state: Mutex<State>
    private let limit: Int
    private let window: Duration
    private let logger: Logger
    private let what: String

    /// `what` names the suppressed lines in the summary.
    init(logger: Logger, limit: Int = 10, window: Duration = .seconds(10), what: String) {
        self.logger = logger
        self.limit = limit
        self.window = window
        self.what = what
        state = Mutex(State(windowStart: ContinuousClock.now))
    }

    func warning(_ message: @autoclosure () -> Logger.Message, metadata: Logger.Metadata = [:]) {
        let now = ContinuousClock.now
        let window = self.window
        let (log, summary, scheduleFlush) = state.withLock { s -> (Bool, Int, Bool) in
            var summary = 0
            if now - s.windowStart >= window {
                summary = s.suppressed
                s = State(windowStart: now)
            }
            if s.logged < limit {
                s.logged += 1
                return (true, summary, false)
            }
            s.suppressed += 1
            defer { s.flushScheduled = true }
            return (false, summary, !s.flushScheduled)
        }
        if summary > 0 { report(summary) }
        if log { logger.warning(message(), metadata: metadata) }
        if scheduleFlush {
            Task { [self] in
                try? await Task.sleep(for: window)
                flush()
            }
        }
    }

    /// Reports what was suppressed so far.
    func flush() {
        let suppressed = state.withLock { s -> Int in
            defer {
                s.suppressed = 0
                s.flushScheduled = false
            }
            return s.suppressed
        }
        if suppressed > 0 { report(suppressed) }
    }

    private func report(_ count: Int) {
        logger.warning("suppressed \(count) more lines about \(what)", metadata: ["suppressed": "\(count)"])
    }
}
