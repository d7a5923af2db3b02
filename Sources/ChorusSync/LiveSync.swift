import ChorusNode
import Foundation
import Synchronization

/// Where a live sync stands (`Node.liveSync`), for a status line or an
/// offline banner.
public enum LiveSyncState: Hashable, Sendable {
    /// Connecting (TCP and the Noise handshake); `attempt` counts the tries
    /// since the connection was last live, from 1.
    case connecting(attempt: Int)
    /// Connected and authenticated: the two nodes are catching up.
    case syncing
    /// Caught up: new events flow both ways as they commit.
    case live
    /// The last try failed or the connection ended, for `reason`; the next
    /// try starts after `retryIn` (exponential backoff with jitter).
    case waiting(retryIn: Duration, reason: LiveSyncFailure)
    /// Stopped (`LiveSync.stop()`); nothing more follows.
    case stopped
}

/// Why a live sync's connection failed or ended: the error's stable code
/// (`connection_refused`, `handshake_failed`, `connection_closed`, …) and a
/// sentence for people.
public struct LiveSyncFailure: Hashable, Sendable {
    /// A stable, snake-case code.
    public let code: String
    /// What happened, for people.
    public let message: String

    init(_ error: any Error) {
        switch error {
        case let e as SyncError: (code, message) = (e.code, e.description)
        case let e as SecureConnectionError: (code, message) = (e.code, e.description)
        default: (code, message) = ("sync_failed", String(describing: error))
        }
    }

    init(code: String, message: String) {
        self.code = code
        self.message = message
    }

    /// A live connection the peer or the network ended.
    static let ended = LiveSyncFailure(code: "connection_closed", message: "the live connection ended")
}

/// How long a live sync waits between tries: `initial` after the first
/// failure, multiplied by `multiplier` after each further one, at most
/// `maximum`, each wait drawn uniformly from [(1 − jitter)·d, d] so that
/// many devices cut off together do not return together.
public struct Backoff: Hashable, Sendable {
    /// The wait after the first failure.
    public var initial: Duration
    /// The longest wait.
    public var maximum: Duration
    /// How much longer each wait is than the one before, at least 1.
    public var multiplier: Double
    /// The fraction of each wait drawn at random, 0...1.
    public var jitter: Double

    /// A backoff from `initial` to `maximum`, `multiplier` times longer
    /// after each failure, with `jitter` of each wait drawn at random.
    public init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(60), multiplier: Double = 2, jitter: Double = 0.5) {
        self.initial = initial
        self.maximum = maximum
        self.multiplier = max(1, multiplier)
        self.jitter = min(1, max(0, jitter))
    }

    /// The wait after the `failures`-th failure in a row (from 1), given a
    /// uniform random number in 0..<1.
    package func delay(afterFailure failures: Int, random: Double) -> Duration {
        let base = Double(initial.components.seconds) + Double(initial.components.attoseconds) / 1e18
        let cap = Double(maximum.components.seconds) + Double(maximum.components.attoseconds) / 1e18
        let full = min(cap, base * pow(multiplier, Double(max(0, failures - 1))))
        return .nanoseconds(Int64((full * (1 - jitter * random) * 1e9).rounded()))
    }
}

/// A live sync that keeps reconnecting (`Node.liveSync`): its states as an
/// `AsyncSequence`, the current one, and `stop()`.
public final class LiveSync: Sendable {
    private let current = Mutex<LiveSyncState>(.connecting(attempt: 1))
    private let continuation: AsyncStream<LiveSyncState>.Continuation
    /// Every state in order, from the first; it ends after `.stopped`. A
    /// consumer slower than the changes sees the newest 16.
    public let states: AsyncStream<LiveSyncState>
    private let task = Mutex<Task<Void, Never>?>(nil)

    init() {
        (states, continuation) = AsyncStream.makeStream(of: LiveSyncState.self, bufferingPolicy: .bufferingNewest(16))
    }

    /// The state now.
    public var state: LiveSyncState { current.withLock { $0 } }

    func set(_ state: LiveSyncState) {
        let changed = current.withLock { s -> Bool in
            guard s != state, s != .stopped else { return false }
            s = state
            return true
        }
        if changed { continuation.yield(state) }
        if state == .stopped { continuation.finish() }
    }

    func start(_ body: @escaping @Sendable (LiveSync) async -> Void) {
        continuation.yield(.connecting(attempt: 1))
        task.withLock { $0 = Task { await body(self) } }
    }

    /// Closes the connection, stops reconnecting and returns once stopped.
    public func stop() async {
        let running = task.withLock { $0 }
        running?.cancel()
        await running?.value
        set(.stopped)
    }
}

extension Node {
    /// Syncs live with the node serving at `host:port` and keeps doing so:
    /// when the connection fails or ends, it waits (`backoff`, with jitter)
    /// and connects again, and starts over from the first wait once a
    /// connection is live again. Watch `states` for connecting, syncing,
    /// live and waiting (with the reason); `stop()` ends it.
    ///
    /// ```swift
    /// let sync = node.liveSync(with: "relay.example.org", port: 7800)
    /// for await state in sync.states { statusLine = "\(state)" }
    /// ```
    public nonisolated func liveSync(
        with host: String, port: Int, options: SyncOptions = SyncOptions(live: true), backoff: Backoff = Backoff()
    ) -> LiveSync {
        let sync = LiveSync()
        sync.start { [self] sync in
            var failures = 0
            var options = options
            options.live = true
            let completed = options.onComplete
            options.onComplete = { report in
                sync.set(.live)
                completed?(report)
            }
            while !Task.isCancelled {
                sync.set(.connecting(attempt: failures + 1))
                let failure: LiveSyncFailure
                do {
                    let report = try await SyncNetwork.sync(self, host: host, port: port, options: options, connected: { sync.set(.syncing) })
                    failure = .ended
                    // A connection that reached live starts the waits over.
                    if report.live { failures = 0 }
                } catch {
                    failure = LiveSyncFailure(error)
                    if sync.state == .live { failures = 0 }
                }
                if Task.isCancelled { break }
                failures += 1
                let wait = backoff.delay(afterFailure: failures, random: Double.random(in: 0..<1))
                sync.set(.waiting(retryIn: wait, reason: failure))
                try? await Task.sleep(for: wait)
            }
            sync.set(.stopped)
        }
        return sync
    }
}
