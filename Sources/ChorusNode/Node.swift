import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusProjections
import ChorusStorage
import ChorusStore
import Foundation
import Synchronization

/// Settings for creating, opening or upgrading a store. The defaults suit an
/// app; tests replace the clock and the sizes.
public struct NodeOptions: Sendable {
    /// How far ahead of this node's clock an event's timestamp may be (Specs/events.md §7.2).
    public var driftMillis: UInt64 = 60_000
    /// The LMDB map size to start from; it doubles whenever it fills.
    package var initialMapSize: Int = 256 << 20
    /// The wall clock in Unix milliseconds (replaceable in tests).
    public var clock: @Sendable () -> UInt64 = { UInt64(Date().timeIntervalSince1970 * 1000) }
    /// The largest picture this node stores (blob size cap).
    package var maxBlobBytes: Int = 16 << 20
    /// Told how far a rebuild of the projections has got, when opening a
    /// store whose projections are stale (an older store, or a changed
    /// network configuration) has to fold the whole log again.
    public var rebuildProgress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    /// Called once before such a rebuild starts, with why the stored
    /// projections are stale and how many events the log holds: a serving
    /// node logs it, since the rebuild may take minutes.
    public var onRebuild: (@Sendable (_ why: Staleness, _ events: Int) -> Void)? = nil
    /// How long a read-write `open` waits for another process that holds the
    /// store's writer lock before it fails with `NodeError.storeInUse`. The
    /// default is a moment: a lock is also held, briefly, by a child process
    /// that another thread of this process is starting (it shares the open
    /// lock file until it executes its program), and by a node in another
    /// process that is closing.
    package var writerLockWait: Duration = .milliseconds(250)
    /// Called once when `open` has waited a second for the writer lock.
    package var onWaitingForWriterLock: (@Sendable () -> Void)? = nil
    /// The coins credits may add up to (`Projections.supplyLimit`): lower
    /// only where tests and fuzzing reach the limit.
    package var supplyLimit: Int64 = Projections.defaultSupplyLimit

    /// The default options: 60 000 ms drift, a 256 MiB initial map, the system
    /// clock, 16 MiB pictures and no wait for another process's writer lock.
    public init() {}
}

/// A Chorus node on one store: the embeddable library API (README,
/// "Embedding the library"). It signs this device's events, ingests remote ones and reads
/// the log. Writes go through one group-commit writer; reads are
/// `nonisolated` and run concurrently in LMDB read transactions.
public actor Node {
    /// The path of the store directory this node was created or opened at.
    public nonisolated let storePath: String
    /// The keys this node acts with: its user, its device and, for an issuer, its issuer key.
    public nonisolated let identity: Identity
    /// The store's log, blobs and projections, and its one commit (one value,
    /// built when the node opens; the writer commits through it).
    package nonisolated let store: Store
    /// The store's event log, for reading raw events and feeds. Write only through
    /// the node: the store has one writer (Specs/storage.md §5.1).
    package nonisolated let log: LogStore
    /// Profiles, pictures, relationships, chats, coins and slots: what the
    /// node's reads (`profile(of:)`, `balance(of:)`, …) answer from.
    package nonisolated let projections: Projections
    /// The store's content-addressed blobs: picture bytes and encrypted chat
    /// attachments, keyed by their BLAKE2b-256 hash.
    package nonisolated let blobs: BlobStore
    /// The store's network configuration (issuers, slot prices; `network.json`),
    /// which the projections apply (Specs/projections.md §1).
    public nonisolated var network: NetworkConfig { projections.config }
    /// The options this node was opened with.
    public nonisolated let options: NodeOptions
    /// Whether the node was opened read-only: it then holds no signing key, every
    /// write throws ``NodeError/readOnly`` and ingested events are refused.
    public nonisolated let isReadOnly: Bool

    let deviceKey: SigningKey?
    let userKey: SigningKey?
    let issuerKey: SigningKey?
    let writer: GroupCommitWriter?
    nonisolated let writerNotifier: ArrivalNotifier
    /// This device's encryption key and the epoch keys it has unwrapped.
    nonisolated let keyRing: KeyRing
    /// Chat titles and messages this device has opened (`OpenedContent`).
    package nonisolated let openedContent: OpenedContent
    /// Signature checks of received events shared between concurrent ingests.
    nonisolated let verificationClaims = VerificationClaims()
    /// Signatures of received events this node checked (for tests and the
    /// benchmarks: the same events from two relays are checked once).
    package nonisolated let signatureChecks = Atomic<Int>(0)
    let signer: BatchSigner?
    var lockFD: Int32
    var clock: HybridClock
    /// Heads of the feeds this node signs, ahead of the store while appends
    /// are in flight (a key present with a nil value: the feed is empty).
    var signingHeads: [PublicKey: FeedHead?] = [:]
    /// Bumped when a failed write forces a reload from the store, so the
    /// failures of events signed before it do not reload a second time.
    var signingGeneration: [PublicKey: Int] = [:]

    init(
        path: String, store: Store, user: PublicKey, userKey: SigningKey?, device: SigningKey,
        issuer: SigningKey?, agreement: AgreementKey?, lockFD: Int32, readOnly: Bool, options: NodeOptions
    ) {
        self.keyRing = KeyRing(agreement: agreement)
        self.storePath = path
        self.store = store
        self.log = store.log
        self.projections = store.projections
        self.blobs = store.blobs
        self.options = options
        self.isReadOnly = readOnly
        self.identity = Identity(user: UserID(user), device: DeviceID(device.publicKey), issuer: issuer?.publicKey)
        self.userKey = readOnly ? nil : userKey
        self.deviceKey = readOnly ? nil : device
        self.issuerKey = readOnly ? nil : issuer
        self.lockFD = lockFD
        self.clock = HybridClock(last: (try? store.log.maxHLC()) ?? .zero)
        let opened = OpenedContent()
        self.openedContent = opened
        let writer =
            readOnly ? nil : GroupCommitWriter(
                store: store,
                driftMillis: options.driftMillis, nowMillis: options.clock,
                committed: { events, outcomes in
                    // A deleted message's plaintext goes with its sealed bytes.
                    var deleted: [EventID] = []
                    for (event, outcome) in zip(events, outcomes) where event.header.kind == .messageDeleted {
                        if case .accepted = outcome { deleted.append(event.header.object) }
                    }
                    opened.forget(messages: deleted)
                })
        self.writer = writer
        self.writerNotifier = writer?.notifier ?? ArrivalNotifier()
        self.signer = writer.map(BatchSigner.init(writer:))
    }

    /// Finishes queued writes and releases the store. Idempotent.
    public func close() {
        signer?.close()
        writer?.close()
        writerNotifier.finishAll()
        // Every queued write is durable now; reads still in flight finish
        // first. Later calls fail with "the store is closed".
        log.env.close()
        openedContent.removeAll()
        if lockFD >= 0 {
            Foundation.close(lockFD)
            lockFD = -1
        }
    }

    deinit {
        signer?.close()
        writer?.close()
        if lockFD >= 0 { Foundation.close(lockFD) }
    }

    // MARK: Reading

    /// The head of `author`'s feed as stored (sequence number, id and HLC of its
    /// last event), or `nil` if this node holds none of its events. Throws if the store cannot be read.
    package nonisolated func head(of author: PublicKey) throws -> FeedHead? { try log.head(of: author) }
    /// The head of every feed this node holds, ordered by author key: what sync
    /// announces to peers. Throws if the store cannot be read.
    package nonisolated func heads() throws -> [(author: PublicKey, head: FeedHead)] { try log.allHeads() }
    /// The stored event with this id and its local arrival position, or `nil` if
    /// this node does not hold it. A purged event comes without its payload.
    package nonisolated func event(_ id: EventID) throws -> StoredEvent? { try log.event(id) }
    /// Up to `limit` events of `author`'s feed from sequence number `fromSeq`, in
    /// sequence order. Throws if the store cannot be read.
    package nonisolated func feed(_ author: PublicKey, fromSeq: UInt64 = 1, limit: Int = .max) throws -> [StoredEvent] {
        try log.feed(author, fromSeq: fromSeq, limit: limit)
    }
    /// Events that arrived after local position `since`, in arrival order.
    package nonisolated func arrivals(since: UInt64 = 0, limit: Int = .max) throws -> [StoredEvent] {
        try log.arrivals(since: since, limit: limit)
    }
    /// The local arrival position of the newest stored event (0 for an empty log);
    /// pass it later to ``arrivals(since:limit:)`` to read only what came after.
    package nonisolated func lastArrival() throws -> UInt64 { try log.lastArrival() }
    /// A feed's stored envelopes from `fromSeq` as bytes, for serving.
    package nonisolated func feedEnvelopes(_ author: PublicKey, fromSeq: UInt64, limit: Int) throws -> [(seq: UInt64, envelope: [UInt8])] {
        try log.feedEnvelopes(author, fromSeq: fromSeq, limit: limit)
    }
    /// Evidence of every forked feed this node has seen: for an author and
    /// sequence number, the event kept and the conflicting one refused.
    package nonisolated func forks() throws -> [ForkEvidence] { try log.forkEvidence() }

    /// Group-commit statistics of this node's writer.
    package nonisolated var writerStatistics: WriterStatistics {
        writer?.statistics ?? WriterStatistics()
    }

    /// Returns once this node's writer has run an empty job after every
    /// write queued before it: the writer commits. Throws
    /// ``NodeError/readOnly`` on a read-only node and `StorageError.closed`
    /// after `close()`. A writer that is stuck (a full disk, a stalled
    /// device) makes this wait; callers bound the wait.
    package nonisolated func probeWriter() async throws {
        guard let writer else { throw NodeError.readOnly }
        let _: [AppendOutcome] = try await withCheckedThrowingContinuation { continuation in
            writer.exclusively({}, completion: { continuation.resume(with: $0) })
        }
    }

    /// Seconds this node's store has spent writing and flushing committed
    /// pages (`mdb_txn_commit`).
    package nonisolated var secondsInDurableCommits: Double { log.env.secondsInDurableCommits }
}
