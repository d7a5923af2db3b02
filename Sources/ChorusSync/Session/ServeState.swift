import NIOCore

/// The server's side of a session (Specs/sync.md §4.3, §5): requests queued
/// and not yet served, received events gathered into frames, and the window
/// of data frames sent and not yet acknowledged. Pure state: the session
/// reads the store, sends the frames and waits when the window is shut.
package struct ServeState: Sendable {
    /// Window units this side may still spend before an `ack`: an `events`
    /// frame takes `DataFrame.events.units`, a blob frame one
    /// (Specs/sync.md §5).
    package private(set) var credits: Int
    /// The units of each data frame sent and not yet acknowledged, oldest
    /// first: an `ack(n)` returns those of the n oldest.
    private var unacknowledged = CircularBuffer<Int>()
    private var batch: [[UInt8]] = []
    private var batchBytes = 0
    /// Requested items (ranges, ids, hashes) queued and not yet served.
    private var queuedItems = 0
    /// Ranges of the peer's `want` messages since its last `wantEnd`.
    var wanted: [FeedRange] = []
    let budget: SessionBudget
    /// Events and their bytes served in this session.
    package private(set) var servedEvents = 0
    /// Envelope bytes served in this session, counted against `budget.bytes`.
    package private(set) var servedBytes = 0

    /// Whether this session served its budget: the rest of the peer's
    /// ranges go unanswered (Specs/sync.md §5.1).
    package var budgetSpent: Bool { servedEvents >= budget.events || servedBytes >= budget.bytes }
    /// Events this session may still serve before its event budget is spent (0
    /// once it is).
    package var eventsLeft: Int { max(0, budget.events - servedEvents) }

    /// The most requested items (ranges, event ids, blob hashes) queued and not
    /// yet served; more ends the session with `unexpected_message`
    /// (Specs/sync.md §5).
    package static let maxQueuedItems = 1_000_000

    /// Starts with a window of `window` events frames (at least 1), so
    /// four times as many blob frames, and nothing served; `budget` bounds
    /// what the session serves (Specs/sync.md §5.1).
    package init(window: Int, budget: SessionBudget = SessionBudget()) {
        self.budget = budget
        credits = max(1, window) * DataFrame.events.units
    }

    /// The window's units a data frame takes (Specs/sync.md §5): its
    /// largest size in 64 KiB, so the window bounds the bytes in flight
    /// whatever the frames are.
    package enum DataFrame: Sendable {
        /// An `events` frame: at most 256 KiB of envelopes.
        case events
        /// A `blobData` (at most 64 KiB of a blob) or `blobMissing` frame.
        case blob

        /// The units this frame takes.
        package var units: Int {
            switch self {
            case .events: 4
            case .blob: 1
            }
        }
    }

    /// An `ack(n)`: the n oldest data frames in flight are acknowledged and
    /// their units may be spent again. More than are in flight is
    /// `unexpected_message`.
    package mutating func acknowledge(_ n: UInt64) throws(SyncError) {
        guard n <= UInt64(unacknowledged.count) else { throw .unexpected("more acknowledgements than data frames sent") }
        for _ in 0..<n { credits += unacknowledged.removeFirst() }
    }

    /// Takes the window's units for one data frame; false when they are not
    /// all free.
    package mutating func takeCredit(for frame: DataFrame) -> Bool {
        guard credits >= frame.units else { return false }
        credits -= frame.units
        unacknowledged.append(frame.units)
        return true
    }

    /// Counts `items` newly requested items as queued. Throws
    /// `SyncError.unexpected` once more than `maxQueuedItems` are queued.
    package mutating func queue(_ items: Int) throws(SyncError) {
        queuedItems += items
        if queuedItems > Self.maxQueuedItems { throw .unexpected("over a million requests queued") }
    }

    /// Counts `items` queued items as served, making room for more requests.
    package mutating func served(_ items: Int) { queuedItems -= items }

    /// Adds one envelope to the events frame being gathered. Returns the
    /// frame to send first when this one does not fit in it (§4.3: at most
    /// 1024 events or 256 KiB, a larger event alone).
    package mutating func add(_ envelope: [UInt8]) -> [[UInt8]]? {
        var full: [[UInt8]]? = nil
        if batchBytes + envelope.count > SyncLimits.eventBatchBytes || batch.count >= SyncLimits.eventBatchCount { full = flush() }
        batch.append(envelope)
        batchBytes += envelope.count
        servedEvents += 1
        servedBytes += envelope.count
        return full
    }

    /// The frame gathered so far, if any, emptied.
    package mutating func flush() -> [[UInt8]]? {
        guard !batch.isEmpty else { return nil }
        defer {
            batch = []
            batchBytes = 0
        }
        return batch
    }
}
