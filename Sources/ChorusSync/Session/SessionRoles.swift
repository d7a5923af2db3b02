import ChorusCrypto

// The state of a session's smaller roles, each a value type with its
// decisions, beside `FetchState`, `ServeState`, `BlobFetchState` and
// `Intake` (Specs/sync.md §4).

/// How a session's first announcement is found (Specs/sync.md §4.2.1,
/// §4.2.2) and the peer's reconciliation messages on their way to it.
struct ReconcileState {
    var mode = SyncSession.Reconciliation.none
    /// The reconciliation ended: a later reconciliation message is a protocol error.
    var finished = false
    /// This side's part in a sketch reconciliation, once decided.
    var sketchRole: SketchReconciler.Role? = nil
    /// The peer's reconciliation messages, in order.
    let inputs = AsyncQueue<SyncSession.ReconcileInput>()

    /// Whether the peer may send `input` now: rounds in a tree (or a
    /// sketch falling back to one), sketch messages in a sketch, nothing
    /// once it ended.
    func admits(_ input: SyncSession.ReconcileInput) -> Bool {
        guard !finished else { return false }
        return switch (input, mode) {
        case (.round, .tree), (.round, .sketch): true
        case (.info, .sketch), (.sums, .sketch), (.result, .sketch): true
        default: false
        }
    }
}

/// The highest sequence number per feed the peer is known to hold (from its
/// announcements, its wants and what was sent to it), so that live
/// announcements (Specs/sync.md §4.6) name only what it lacks.
struct PeerHeads {
    private var known: [PublicKey: UInt64] = [:]

    /// The peer holds `author`'s feed up to at least `seq`.
    mutating func note(_ author: PublicKey, holds seq: UInt64) {
        if (known[author] ?? 0) < seq { known[author] = seq }
    }

    /// The announcements that name more than the peer is known to hold.
    func lacking(_ heads: [FeedAnnouncement]) -> [FeedAnnouncement] {
        heads.filter { (known[$0.author] ?? 0) < $0.seq }
    }
}

/// Frames queued for the network and not yet handed to it: serving waits
/// while more than `SyncLimits.outboxBytes` are queued, and a session
/// with frames the peer does not take is not idle.
struct OutboxLoad {
    private(set) var frames = 0
    private(set) var bytes = 0
    /// The most bytes ever queued at once.
    private(set) var peakBytes = 0

    mutating func queued(_ count: Int) {
        frames += 1
        bytes += count
        peakBytes = max(peakBytes, bytes)
    }

    mutating func taken(_ count: Int) {
        frames -= 1
        bytes -= count
    }
}

/// How a session ends (Specs/sync.md §4.5): each side's `done`, then
/// closing (at once unless live); or the first error, which ends it
/// however far it got. An error after a completed session has closed is
/// not one.
struct SessionEnding {
    /// This side sent `done`.
    private(set) var sentDone = false
    /// The peer sent `done`.
    private(set) var peerDone = false
    /// The session is closing: nothing more is sent or waited for.
    private(set) var closing = false
    /// The session's first error.
    private(set) var error: SyncError? = nil

    /// Closing, or failed.
    var isStopping: Bool { closing || error != nil }
    /// Both sides said `done`: the sync is complete.
    var bothDone: Bool { sentDone && peerDone }

    mutating func saidDone() { sentDone = true }

    /// The peer's `done`; a second one is a protocol error.
    mutating func peerSaidDone() throws(SyncError) {
        guard !peerDone else { throw .unexpected("a second done") }
        peerDone = true
    }

    mutating func close() { closing = true }

    /// Records `error` as the session's and closes; false when the session
    /// already failed, or completed and closed (`complete`).
    mutating func fail(_ error: SyncError, complete: Bool) -> Bool {
        guard self.error == nil, !(closing && complete) else { return false }
        self.error = error
        closing = true
        return true
    }
}

/// When anything in a session last moved, for its idle timeout: a frame
/// received or handed to the network, a local ingest finished.
struct IdleWatch {
    private(set) var lastProgress = ContinuousClock.now
    /// The fetcher waits for the peer's answer.
    var fetchWaiting = false

    mutating func progressed() { lastProgress = .now }

    /// Nothing moved for `limit`.
    func isIdle(now: ContinuousClock.Instant, limit: Duration) -> Bool { now - lastProgress >= limit }
}
