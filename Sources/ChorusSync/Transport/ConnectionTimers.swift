import Foundation
import NIOCore

/// First error wins; shared with event-loop timers.
final class SecureFailureBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: SecureConnectionError?
    /// Whether the handshake finished before its deadline: the deadline and
    /// the handshake's end race (the timer runs on the event loop, the
    /// handshake on the actor), so exactly one of them claims the outcome.
    private var handshakeOver = false

    func set(_ error: SecureConnectionError) {
        lock.withLock { if stored == nil { stored = error } }
    }

    /// The handshake deadline passed: records the timeout and returns true,
    /// unless the handshake already completed.
    func expireHandshake() -> Bool {
        lock.withLock {
            guard !handshakeOver else { return false }
            handshakeOver = true
            if stored == nil { stored = .handshakeTimeout }
            return true
        }
    }

    /// The handshake completed: returns false when its deadline passed first.
    func completeHandshake() -> Bool {
        lock.withLock {
            guard !handshakeOver else { return false }
            handshakeOver = true
            return true
        }
    }

    var error: SecureConnectionError? { lock.withLock { stored } }
}

/// A connection's deadlines (Specs/sync-transport.md §6): the handshake
/// deadline, the idle deadline (armed while nothing arrives), a deadline
/// per write, and the keepalive task. A deadline that passes records why
/// in `failure` and closes the channel through `close`; the connection's
/// reader then ends with that error.
struct ConnectionTimers {
    let loop: any EventLoop
    let failure: SecureFailureBox
    let close: @Sendable () -> Void
    private(set) var handshake: Scheduled<Void>?
    private(set) var idle: Scheduled<Void>?
    private(set) var keepalive: Task<Void, Never>?

    init(loop: any EventLoop, failure: SecureFailureBox, close: @escaping @Sendable () -> Void) {
        self.loop = loop
        self.failure = failure
        self.close = close
    }

    /// Ends the connection with `handshakeTimeout` after `timeout`, unless
    /// the handshake completes first (`SecureFailureBox.completeHandshake`).
    mutating func armHandshake(_ timeout: Duration) {
        let (failure, close) = (self.failure, self.close)
        handshake = loop.scheduleTask(in: timeout.timeAmount) {
            if failure.expireHandshake() { close() }
        }
    }

    mutating func cancelHandshake() {
        handshake?.cancel()
        handshake = nil
    }

    /// Ends the connection with `idleTimeout` after `timeout` unless
    /// cancelled first; a deadline already armed is left as it is.
    mutating func armIdle(_ timeout: Duration) {
        guard idle == nil else { return }
        idle = deadline(timeout)
    }

    mutating func cancelIdle() {
        idle?.cancel()
        idle = nil
    }

    /// A deadline of its own, for one write: `idleTimeout` after `timeout`
    /// unless the caller cancels it.
    func deadline(_ timeout: Duration) -> Scheduled<Void> {
        let (failure, close) = (self.failure, self.close)
        return loop.scheduleTask(in: timeout.timeAmount) {
            failure.set(.idleTimeout)
            close()
        }
    }

    /// Calls `tick` every `interval` until cancelled (the keepalive: the
    /// caller sends one when it has sent nothing for `interval`,
    /// `keepaliveIsDue`).
    mutating func startKeepalive(every interval: Duration, _ tick: @escaping @Sendable () async -> Bool) {
        keepalive = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard !Task.isCancelled, await tick() else { return }
            }
        }
    }

    mutating func cancelKeepalive() {
        keepalive?.cancel()
        keepalive = nil
    }

    mutating func stopAll() {
        cancelHandshake()
        cancelIdle()
        cancelKeepalive()
    }

    /// Whether a keepalive is due: nothing sent for `interval`.
    static func keepaliveIsDue(lastSend: ContinuousClock.Instant, now: ContinuousClock.Instant, interval: Duration) -> Bool {
        now - lastSend >= interval
    }
}
