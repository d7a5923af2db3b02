import ChorusBlobs
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusProjections
import ChorusStorage
import Foundation

/// One node's LMDB environment with everything in it: the log, the blobs
/// and the projections. It owns the commit: every writer (the node's group
/// commit, the replay tool's copies, the test harnesses) appends and folds
/// through `commit`, so the log and the projections can never disagree
/// (Specs/storage.md). The projections decide what deletion purges; the
/// store purges it from the log and the blobs (`carryOut`).
public struct Store: Sendable {
    public let env: Environment
    public let log: LogStore
    public let blobs: BlobStore
    package let projections: Projections
    /// The databases sync keeps beside the log (Specs/storage.md, "Sync
    /// bookkeeping"): known peers, inbox deliveries, relay routing memory.
    /// Their records are the sync layer's; they are written only through
    /// the node's writer. Nil in a read-only store that never had them.
    package let bookkeeping: Bookkeeping?

    /// The bookkeeping database at `path` (`Store.bookkeeping`); throws
    /// `BookkeepingMissing` for a read-only store that never had them.
    package func bookkeepingDatabase(_ path: KeyPath<Bookkeeping, Database> & Sendable, named name: String) throws -> Database {
        guard let bookkeeping else { throw BookkeepingMissing(database: name) }
        return bookkeeping[keyPath: path]
    }

    /// The sync bookkeeping databases (`Store.bookkeeping`).
    package struct Bookkeeping: Sendable {
        package let peers: Database
        package let inbox: Database
        package let routing: Database

        /// The names of the databases, as Specs/storage.md lists them.
        package static let databaseNames = ["peers", "inbox", "routing"]

        /// Each database with its name (`databaseNames`' order).
        package var named: [(name: String, database: Database)] {
            zip(Self.databaseNames, [peers, inbox, routing]).map { ($0, $1) }
        }

        /// Opens them in `env`, creating them unless it is read-only; nil
        /// when a read-only environment lacks one.
        static func open(in env: Environment) throws -> Bookkeeping? {
            func open(_ name: String) throws -> Database? {
                env.readOnly ? try? env.openDatabase(name, create: false) : try env.openDatabase(name)
            }
            guard let peers = try open("peers"), let inbox = try open("inbox"), let routing = try open("routing") else { return nil }
            return Bookkeeping(peers: peers, inbox: inbox, routing: routing)
        }
    }

    /// Opens the log, blobs and projections of `env` under `config`: the
    /// one way a store is put together, for the node, the replay tool,
    /// compaction and the test harnesses alike.
    public init(env: Environment, config: NetworkConfig) throws {
        try self.init(env: env, config: config, recentMinimum: nil)
    }

    /// With `recentMinimum`, the id index's and the facts' recent levels
    /// merge after that many entries (tests that fold across the levels);
    /// with `supplyLimit`, the coins credits may add up to is that
    /// (tests that reach it, `Projections.supplyLimit`).
    package init(env: Environment, config: NetworkConfig, recentMinimum: Int?, supplyLimit: Int64 = Projections.defaultSupplyLimit) throws {
        self.env = env
        if let recentMinimum {
            log = try LogStore(env: env, recentIDsMinimum: recentMinimum)
            blobs = try BlobStore(env: env)
            projections = try Projections(
                log: log, blobs: blobs, config: config, recentFactsMinimum: recentMinimum, supplyLimit: supplyLimit)
        } else {
            log = try LogStore(env: env)
            blobs = try BlobStore(env: env)
            projections = try Projections(
                log: log, blobs: blobs, config: config, recentFactsMinimum: Projections.defaultRecentFactsMinimum, supplyLimit: supplyLimit)
        }
        bookkeeping = try Bookkeeping.open(in: env)
    }

    /// The network configuration of the store directory at `path`
    /// (`network.json`, Specs/projections.md §1); a store from before
    /// configurations has none and gets the empty one, written there when
    /// `writeDefault` (a writable open).
    public static func configuration(ofStoreAt path: String, writeDefault: Bool) throws -> NetworkConfig {
        let file = path + "/" + NetworkConfig.fileName
        if FileManager.default.fileExists(atPath: file) { return try NetworkConfig.load(from: file) }
        let config = NetworkConfig()
        if writeDefault { try config.write(to: file) }
        return config
    }

    /// Runs `body` in one write transaction, then folds every event it
    /// stored (or refilled) into the projections in the same transaction:
    /// either all of it is durable or none. `now` and `drift` are the feed
    /// checks' clock (Specs/events.md §7.2); `fold: false` only appends,
    /// for a copy that rebuilds its projections in bulk afterwards (the
    /// projections are stale until then: `rebuild`).
    ///
    /// A commit that stored at least `largeCommit` events is followed by one
    /// that lets the next reuse the pages it freed (Specs/storage.md §5.1
    /// step 8).
    public func commit<T>(
        nowMillis: UInt64, driftMillis: UInt64, fold: Bool = true, _ body: (inout CommitBatch) throws -> T
    ) throws -> T {
        var stored = 0
        let result = try env.write { txn in
            var batch = CommitBatch(store: self, transaction: txn, context: try log.appendContext(in: txn, nowMillis: nowMillis, driftMillis: driftMillis))
            let result = try body(&batch)
            try log.finish(&batch.context, in: txn)
            if fold { try carryOut(try projections.apply(batch.stored, refilled: batch.refilled, in: txn), in: txn) }
            stored = batch.stored.count
            return result
        }
        // The events are durable whatever happens here: a failure (a full
        // disk) only leaves the freed pages for later, and the next commit
        // reports it.
        if stored >= Self.largeCommit { try? log.releaseFreedPages() }
        return result
    }

    /// Carries out `purges` after the fold that decided them, in its
    /// transaction: strips each payload from the log (Specs/events.md §6)
    /// and removes each blob that no live object references in the state
    /// as folded (Specs/projections.md §6.3, §6.6).
    package func carryOut(_ purges: Purges, in txn: Transaction) throws {
        for arrival in purges.payloads { try log.purgePayload(atArrival: arrival, in: txn) }
        for blob in Set(purges.blobs) where try !projections.isBlobReferenced(blob, in: txn) { try blobs.delete(blob, in: txn) }
    }

    /// Drops every projection and folds the whole log again, in bulk
    /// (Specs/projections.md §9.2), purging what it finds deleted from the
    /// log and the blobs. `progress` counts events filed, then objects
    /// folded; `isCancelled` is polled between slices (a cancelled rebuild
    /// throws `CancellationError` and leaves the projections stale).
    public func rebuild(progress: ((_ done: Int, _ total: Int) -> Void)? = nil, isCancelled: (() -> Bool)? = nil) throws {
        try rebuild(sliceSize: 20_000, progress: progress, isCancelled: isCancelled)
    }

    /// `rebuild` with the bulk fold's slices, budgets and parts
    /// (`Projections.rebuild`'s parameters), for tests and benchmarks.
    package func rebuild(
        sliceSize: Int, filingBudget: Int = Projections.filingBudget, sendsBudget: Int = Projections.sendsBudget,
        payloadsBudget: Int = Projections.payloadsBudget, part: Int? = nil,
        progress: ((_ done: Int, _ total: Int) -> Void)? = nil, isCancelled: (() -> Bool)? = nil
    ) throws {
        try projections.rebuild(
            sliceSize: sliceSize, filingBudget: filingBudget, sendsBudget: sendsBudget, payloadsBudget: payloadsBudget, part: part,
            progress: progress, isCancelled: isCancelled, carryingOut: carryOut)
    }

    /// Events stored in one commit from which the pages it freed are
    /// released at once: a local append's few events free few pages, and
    /// a second flush would double its latency.
    public static let largeCommit = 4096
}

/// The writes of one commit (`Store.commit`).
public struct CommitBatch {
    let store: Store
    /// The write transaction, for writes that belong with the events (a
    /// received blob stored only if still referenced).
    public let transaction: Transaction
    var context: LogStore.AppendContext
    /// The events stored or refilled so far, folded at the end.
    public private(set) var stored: [StoredEvent] = []
    /// Those of them that were refilled (stored before, with their payload
    /// purged): they may have been folded, and decided, already.
    public private(set) var refilled: Set<EventID> = []

    init(store: Store, transaction: Transaction, context: LogStore.AppendContext) {
        self.store = store
        self.transaction = transaction
        self.context = context
    }

    /// Appends one event to its feed (Specs/events.md §7.2); an event stored
    /// or refilled is folded when the commit ends.
    package mutating func append(_ event: Event) throws -> AppendOutcome {
        let outcome = try store.log.append(event, in: transaction, context: &context)
        switch outcome {
        case .accepted(let arrival): stored.append(StoredEvent(event: event, arrival: arrival))
        case .refilled(let arrival):
            stored.append(StoredEvent(event: event, arrival: arrival))
            refilled.insert(event.id)
        case .duplicate, .refused: break
        }
        return outcome
    }

    /// Writes the id-index entries of the events appended so far, for a
    /// body that reads the log by id before the commit ends (a fold run in
    /// the body); otherwise the commit writes them all at its end, in key
    /// order (Specs/storage.md §5.3).
    public mutating func writeIDIndex() throws { try store.log.writeIDIndex(&context, in: transaction) }

    /// The head of `author`'s feed as this transaction holds it so far,
    /// including the events appended earlier in it.
    public func head(of author: PublicKey) throws -> FeedHead? { try store.log.head(of: author, in: transaction, context: context) }

    /// Stores blob bytes in the same transaction, and records that they are
    /// no longer wanted (Specs/projections.md §9.1).
    public func putBlob(_ bytes: [UInt8]) throws {
        try store.projections.blobStored(try store.blobs.put(bytes, in: transaction), in: transaction)
    }
}

/// A read-only store without the sync bookkeeping databases (one that never
/// synced): there is nothing to read.
package struct BookkeepingMissing: Error, CustomStringConvertible {
    package let database: String
    package var description: String { "this store has no \(database) database: it was opened read-only and has never synced" }
}
