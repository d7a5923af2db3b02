import ChorusCrypto

/// What a sync session offers and does: live mode, replication scope, window,
/// optional features, timeouts, serving budget and progress callbacks. The
/// defaults suit a one-off sync of every feed.
public struct SyncOptions: Sendable {
    /// Stay connected after the sync completes and exchange new events as
    /// they arrive. Live mode runs only when both hellos ask for it; a
    /// server sets it to offer live mode to clients that want it.
    public var live = false
    /// Which feeds this side requests (Specs/sync.md §6); every feed by
    /// default. A limited scope travels as `hops` in the hello.
    public var scope = ReplicationScope.all
    /// Unacknowledged data frames in flight towards the peer.
    package var window = SyncLimits.window
    /// Fetches and serves picture blobs (capabilities `blobs` and `blobSerial`,
    /// Specs/sync.md §4.4); on by default.
    public var blobs = true
    /// How long to wait for the peer's hello.
    package var helloTimeout: Duration = .seconds(10)
    /// How long the session may go without progress (no frame received,
    /// none handed to the network, no local ingest finishing) while it
    /// waits for something: before both "done"s, or in live mode while a
    /// request or a send is outstanding. Then it ends with `idle_timeout`.
    package var idleTimeout: Duration = .seconds(60)
    /// Ask the peer for the payloads of events held here without one
    /// although no deletion covers them (Specs/sync.md §4.7).
    package var refill = true
    /// Offers and accepts invitations: feeds that concern this node's user
    /// (Specs/sync.md §4.8). Off only to test an older peer.
    package var invitations = true
    /// Offers range-based reconciliation of feed heads for first contact
    /// (Specs/sync.md §4.2.1); off, every feed is announced instead.
    package var reconcile = true
    /// Prefers sketch reconciliation (Specs/sync.md §4.2.2) when the peer
    /// offers it too; it falls back to `reconcile`'s tree when the sets
    /// differ in too many feeds.
    package var sketch = true
    /// Offers scoped announcements (`scoped`, Specs/sync.md §4.10): a scoped
    /// side names the feeds it wants, the other announces only those.
    package var scoped = true
    /// Offers the inbox exchange (`inbox`, Specs/sync.md §4.11): this side
    /// leaves its own events addressed to users whose inbox the peer is, and
    /// takes the notices the peer holds for its user. Syncing by relay lists
    /// sets it; a listed relay offers it too.
    package var inbox = false
    /// Serves as a relay that hosts a part (`chorus serve --host listed`,
    /// Specs/sync.md §8.1): it requests only the feeds `FeedHosting` keeps,
    /// and keeps, as an inbox, the deliveries addressed to users whose list
    /// names it `inbox`. Off: every feed is requested (`--host all`).
    package var hostsListed = false
    /// Asks for a directory session (`directory`, Specs/sync.md §4.12): only
    /// user keys' own feeds are announced and fetched, by reconciliation,
    /// whatever either side remembers; no inbox exchange, no live mode. A
    /// relay runs one with each bootstrap relay periodically.
    package var directory = false
    /// The most events and bytes of events this side serves the peer in one
    /// session (Specs/sync.md §5.1): past it, the rest of the peer's ranges
    /// go unanswered this session, so one peer cannot hold a server for an
    /// unbounded time; the peer syncs again for the rest.
    package var budget = SessionBudget()
    /// Called as the session fetches: after each committed batch of events,
    /// each blob stored, and each new request (on the session's executor:
    /// keep it short).
    public var onProgress: (@Sendable (SyncProgress) -> Void)? = nil
    /// Called once when both sides have said "done" (before live mode goes on).
    public var onComplete: (@Sendable (SyncReport) -> Void)? = nil

    /// The options of a relay (`chorus serve`): live mode offered, the
    /// inbox exchange offered (any relay may be someone's inbox, Specs/sync.md
    /// §4.11), and with `hostsListed` only the listed part kept, reconciled by
    /// tree (a sketch's decoder pushes feeds unasked, §8.1).
    package static func relay(hostsListed: Bool) -> SyncOptions {
        var options = SyncOptions(live: true)
        options.inbox = true
        if hostsListed {
            options.hostsListed = true
            options.sketch = false
        }
        return options
    }

    /// The options of a relay's directory session with another relay
    /// (Specs/sync.md §4.12): what a relay serving `hostsListed` keeps of
    /// each feed decides what it keeps.
    package static func directory(hostsListed: Bool) -> SyncOptions {
        var options = SyncOptions.relay(hostsListed: hostsListed)
        options.live = false
        options.inbox = false
        options.blobs = false
        options.directory = true
        return options
    }

    /// Options with the given live mode and scope, and the defaults for the
    /// rest.
    public init(live: Bool = false, scope: ReplicationScope = .all) {
        self.live = live
        self.scope = scope
    }
}

/// How far a session's fetching has come: what it asked the peer for so far
/// and what arrived. Totals grow while a limited scope widens.
public struct SyncProgress: Sendable, Hashable {
    /// Events asked for so far: the sum of the requested ranges, plus events a
    /// sketch decoder said it pushes.
    public var eventsRequested: Int
    /// Events received so far, new and duplicate.
    public var eventsReceived: Int
    /// Blob hashes asked for so far.
    public var blobsRequested: Int
    /// Blobs received and stored so far.
    public var blobsReceived: Int
    /// Bytes of every frame received so far.
    public var bytesReceived: Int
}

/// Per-session limits on what one side serves (Specs/sync.md §5.1).
package struct SessionBudget: Sendable, Hashable {
    /// The most events served per session; 1,000,000 by default.
    package var events: Int
    /// The most envelope bytes served per session; 1 GiB by default.
    package var bytes: Int
    /// A budget of `events` events and `bytes` envelope bytes per session.
    package init(events: Int = 1_000_000, bytes: Int = 1 << 30) {
        self.events = events
        self.bytes = bytes
    }
}

/// What a session did. Counts are of this session only.
public struct SyncReport: Sendable, Hashable {
    /// The peer's proved device key and address.
    public var peer: PeerIdentity
    /// The peer's user key from its hello; nil when no hello arrived.
    package var peerUser: PublicKey? = nil
    /// Events stored here for the first time.
    public var eventsReceived = 0
    /// Events received that this node already held.
    package var duplicatesReceived = 0
    /// Events received to restore a payload this node held purged (refill).
    package var payloadsRefilled = 0
    /// Events sent to the peer: answers to its requests and refills, and pushed
    /// events.
    public var eventsSent = 0
    /// Events this side asked the peer for (the sum of its requested ranges).
    package var eventsRequested = 0
    /// Blobs received and stored here (a blob no live picture references any
    /// more is neither stored nor counted).
    public var blobsReceived = 0
    /// Blobs sent to the peer in full.
    package var blobsSent = 0
    /// Blob hashes this side asked the peer for.
    package var blobsRequested = 0
    /// Blobs the peer asked for that this side holds with bytes that no
    /// longer match their hash (damaged on its disk): answered
    /// `blobMissing`, so the session goes on (Specs/sync.md §4.4).
    package var damagedBlobs: [Hash32] = []
    /// Received events the log refused as forks and kept as evidence
    /// (Specs/sync.md §4.3).
    package var forksSeen = 0
    /// `chat.key` events this device wrote after the session to share the
    /// chat keys the received events entitle member devices to.
    package var keyEventsWritten = 0
    /// Why sharing chat keys after the session failed (the received events
    /// are held; member devices lack the wraps until keys are shared again,
    /// as the next sync that brings an event of the chat, or binding a
    /// device, does); nil when it did not fail.
    package var keySharingError: String? = nil
    /// Frames handed to the network, of every message type.
    package var framesSent = 0
    /// Frames received, the peer's hello included.
    package var framesReceived = 0
    /// Bytes of the frames handed to the network (sync messages, without
    /// transport overhead).
    package var bytesSent = 0
    /// Bytes of the frames received (sync messages, without transport
    /// overhead).
    package var bytesReceived = 0
    /// How long the session ran, in seconds.
    public var seconds = 0.0
    /// Both sides said "done".
    public var complete = false
    /// Live mode ran: both hellos carried `live` (Specs/sync.md §4.6).
    public var live = false
    /// A live session ended because the connection failed (the peer went
    /// away without closing), not because either side closed it.
    package var connectionLost = false
    /// This side sent its own device key or a device binding: the peer may
    /// have wrapped chat keys to this device during the session
    /// (Specs/encryption.md §6 rule 5), which the next session brings.
    package var sentDeviceKeys = false
    /// The first announcement was a reconciliation (Specs/sync.md §4.2.1),
    /// in this many rounds sent.
    package var reconciled = false
    /// The session was a directory session (Specs/sync.md §4.12).
    package var directory = false
    /// Times live announcing woke for commits (Specs/sync.md §4.6): only
    /// commits that grew a feed the peer may be announced wake it.
    package var liveWakes = 0
    /// Reconciliation rounds this side sent: `reconcile` rounds, or its
    /// `sketchInfo` and each later sketch round (plus tree rounds after a
    /// fall-back).
    package var reconcileRounds = 0
    /// The reconciliation was by sketch (Specs/sync.md §4.2.2) and found
    /// the difference, without falling back to the tree.
    package var sketched = false
    /// The peer sent less than was asked (its budget, or events stamped
    /// ahead of this node's clock): another session fetches the rest.
    package var partial = false
    /// Sessions this report covers (a sync that continued after a partial one).
    package var sessions = 1
    /// Events a listed relay did not keep because it does not host their
    /// feed (Specs/sync.md §8.1); never the peer's fault.
    package var notHosted = 0
    /// This node's events the peer kept as their addressees' inbox (Specs/sync.md §4.11).
    package var deliveriesLeft = 0
    /// (Event, addressee) pairs this node kept as an inbox for the peer's deliveries.
    package var deliveriesKept = 0
    /// Notices for this node's user received from the peer and kept.
    package var noticesReceived = 0

    /// An empty report for a session with `peer`.
    package init(peer: PeerIdentity) { self.peer = peer }

    /// Adds a follow-up session's counts to this one (one `sync` that took
    /// two sessions reports as one).
    package mutating func add(_ other: SyncReport) {
        eventsReceived += other.eventsReceived
        duplicatesReceived += other.duplicatesReceived
        payloadsRefilled += other.payloadsRefilled
        eventsSent += other.eventsSent
        eventsRequested += other.eventsRequested
        blobsReceived += other.blobsReceived
        blobsSent += other.blobsSent
        forksSeen += other.forksSeen
        keyEventsWritten += other.keyEventsWritten
        keySharingError = keySharingError ?? other.keySharingError
        framesSent += other.framesSent
        framesReceived += other.framesReceived
        bytesSent += other.bytesSent
        bytesReceived += other.bytesReceived
        seconds += other.seconds
        complete = complete && other.complete
        partial = other.partial
        sessions += other.sessions
        blobsRequested += other.blobsRequested
        notHosted += other.notHosted
        deliveriesLeft += other.deliveriesLeft
        deliveriesKept += other.deliveriesKept
        noticesReceived += other.noticesReceived
    }
}

