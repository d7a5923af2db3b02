import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation

/// The projected state of a node: profiles, pictures, relationships, chats,
/// coins and slots, kept in the same LMDB environment as the log and updated
/// in the same write transaction as the append that causes it (Specs/storage.md,
/// "Projection and blob databases"). The state is a pure function of the set of events held:
/// every event is filed as a fact under the objects it touches, and each
/// touched object is re-folded from all of its facts in merge order, so
/// delivery order never matters (Specs/projections.md).
public struct Projections: Sendable {
    /// The event log, whose LMDB environment also holds the projection
    /// databases.
    public let log: LogStore
    /// The blob store: a deletion's purge removes a picture's or message's
    /// blob from it unless a live object still references the same bytes.
    public let blobs: BlobStore
    /// The network configuration folds read (issuers, slot prices); its
    /// fingerprint is part of the digest.
    public let config: NetworkConfig
    /// The facts' main level; `recentFacts` holds those filed and not yet
    /// moved into this one (Specs/projections.md §9.1).
    let facts: Database
    let recentFacts: Database
    let index: Database
    let state: Database
    /// The recent level's target: at least this many entries, or
    /// 1/`recentFactsRatio` of the main level's; a commit moves the excess
    /// into the main level (Specs/projections.md §9.1 says why these).
    let recentFactsMinimum: Int
    static let defaultRecentFactsMinimum = 32_768
    static let recentFactsRatio = 8

    /// The LMDB databases the projections keep beside the log
    /// (Specs/projections.md §9.1).
    public static let databaseNames = ["facts", "facts_recent", "index", "state"]

    /// Opens the `facts`, `facts_recent`, `index` and `state` databases in
    /// `log`'s environment (creating them in a writable one); throws when
    /// LMDB cannot. Folds nothing: see `rebuildIfNeeded`.
    public init(log: LogStore, blobs: BlobStore, config: NetworkConfig) throws {
        try self.init(log: log, blobs: blobs, config: config, recentFactsMinimum: Self.defaultRecentFactsMinimum)
    }

    /// With another least target for the facts' recent level, for tests
    /// that move facts between the levels after a few events.
    init(log: LogStore, blobs: BlobStore, config: NetworkConfig, recentFactsMinimum: Int) throws {
        self.log = log
        self.blobs = blobs
        self.config = config
        self.recentFactsMinimum = recentFactsMinimum
        facts = try log.env.openDatabase("facts")
        index = try log.env.openDatabase("index")
        state = try log.env.openDatabase("state")
        if !log.env.readOnly {
            recentFacts = try log.env.openDatabase("facts_recent")
        } else if let recent = try? log.env.openDatabase("facts_recent", create: false) {
            recentFacts = recent
        } else {
            // Projections from before format 12 have no recent level, and a
            // read-only open cannot add one; they are stale (`isCurrent`)
            // until a read-write open rebuilds them. `facts` read as both
            // levels reads as an empty recent level would: `scanFacts`
            // visits a key held in both once, and nothing read-only moves.
            recentFacts = facts
        }
    }

    /// Folds newly stored events (accepted or refilled) into the projections,
    /// inside the caller's write transaction, and returns the purges the
    /// fold decided, for the caller to carry out (`carryOut`) in the same
    /// transaction. `purging: false` decides none (whole-log folds in
    /// slices leave them to `purgeDeleted`: see `FoldRun.purging`).
    /// `refilled` names the events of `events` that were stored before
    /// (their payload refilled): unlike the others, they may have state
    /// and decisions already.
    package func apply(
        _ events: [StoredEvent], refilled: Set<EventID> = [], in txn: Transaction, purging: Bool = true
    ) throws -> Purges {
        guard !events.isEmpty else { return Purges() }
        var run: FoldRun? = FoldRun(projections: self, txn: txn, purging: purging)
        // Filed in key order once the batch is filed: the transaction's
        // cursors then walk each table forward (facts into their recent
        // level, Specs/projections.md §9.1). The fold reads them after.
        var sink = SortedRunSink(factsDB: facts, indexDB: index)
        // Sized once: grown one insert at a time, these sets rehashed every
        // id a commit of tens of thousands of events stores, again and again.
        run?.newEvents.reserveCapacity(events.count)
        run?.newArrivals.reserveCapacity(events.count)
        run?.sentFacts.reserveCapacity(events.count / 2)
        for stored in events {
            try file(stored, into: &sink, run: &run)
            if !refilled.contains(stored.event.id) { run?.newEvents.insert(stored.event.id) }
            run?.newArrivals.insert(stored.arrival)
        }
        sink.facts.sort()
        try sink.facts.write(0..<sink.facts.count, to: recentFacts, in: txn, append: false)
        sink.index.sort()
        try sink.index.write(0..<sink.index.count, to: index, in: txn, append: false)
        guard var run else { return Purges() }
        try run.execute()
        try moveRecentFactsIfDue(in: txn)
        return run.purges
    }

    /// Carries out `purges` after the fold that decided them: strips each
    /// payload from the log (events.md §6) and removes each blob that no
    /// live object references in the state as folded.
    package func carryOut(_ purges: Purges, in txn: Transaction) throws {
        for arrival in purges.payloads { try log.purgePayload(atArrival: arrival, in: txn) }
        for blob in Set(purges.blobs) where try !isBlobReferenced(blob, in: txn) { try blobs.delete(blob, in: txn) }
    }

    /// Files an event under every object it touches (its `facts` entries
    /// and index entries) and, with a run, marks what must be folded again
    /// (nil: a rebuild, which folds every object afterwards). Returns those
    /// objects (`ObjectClass.targets(of:)`).
    @discardableResult
    func file<Sink: FilingSink>(
        _ stored: StoredEvent, into sink: inout Sink, run: inout FoldRun?
    ) throws -> [(ObjectClass, Bytes32)] {
        let event = stored.event
        let order = MergeOrder(event)
        let targets = ObjectClass.targets(of: event)
        for (cls, object) in targets {
            if event.kind == .messageSent {
                // Not a fact (Specs/projections.md §9.1): the message's own
                // state entry, keyed by chat and time, names it with its
                // arrival position. The fold writes it; a rebuild's filing
                // pass lists the sends (`BulkSend`) for its message pass.
                run?.addSent(Fact(stored))
                continue
            }
            try sink.put(facts, Self.factKey(cls, object, order), Fact.encode(stored, filedUnder: object))
            switch cls {
            case .coins:
                for party in Self.coinParties(event) {
                    try sink.put(index, IndexTable.coinParty.key(party, order), [])
                }
                if let group = FoldRun.coinGroup(kind: event.kind, object: event.object, payload: event.payload) {
                    try sink.put(index, IndexTable.coinGroup.key(group, order), [])
                }
                run?.markCoins(order)
            case .follow, .like, .block:
                // Relationships fold incrementally (one edge per event)
                // unless a device binding change forces a full re-fold.
                if !FoldRun.isAdd(event.kind) {
                    for named in event.payload?[text: "seen"]?.arrayValue?.compactMap(\.id32) ?? [] {
                        try sink.put(
                            index, IndexTable.relationshipCancel.key(cls.rawValue, object, named, order), [])
                    }
                }
                run?.addRelationshipFact(cls, object, Fact(stored))
            case .reads:
                // Read markers fold one fact at a time unless the chat's
                // membership (or a device binding) changes in this run.
                run?.addReadFact(object, Fact(stored))
            case .profile:
                // Profile edits too, unless a device binding of the user changes.
                run?.addProfileFact(object, Fact(stored))
            default:
                run?.mark(cls, object)
            }
        }
        return targets
    }

    /// Drops every projection and folds the whole log again, in bulk
    /// (Specs/projections.md §9.2): first every event is filed, reading the
    /// log once in arrival order, then every object is folded once, class
    /// by class in fold order (`ObjectClass.foldOrder`), each class's
    /// objects in key order, `sliceSize` objects per write transaction.
    /// Because folding is order-independent, the result equals the
    /// incrementally built state. `isCancelled` is polled between slices: a
    /// cancelled rebuild throws `CancellationError` and leaves the state
    /// marked stale (the built marker is written last), so the next open
    /// rebuilds again. `progress` counts events filed, then objects folded.
    /// Filing, and the folds run off the write transaction (held messages
    /// and the classes `foldOffTheWriteTransaction` names), split each
    /// slice into parts, one core each, of at least `part` events or
    /// objects (nil: 4,096 and 256; tests pass a few, to have several parts
    /// in a small log). `sendsBudget` bounds the bytes of sends the filing
    /// lists in memory for the message pass; past it they are filed in
    /// `index` instead (§9.2). `payloadsBudget` bounds the bytes of
    /// payloads the filing keeps for the fold of the classes; past it they
    /// are read from the log again.
    public func rebuild(
        sliceSize: Int = 20_000, filingBudget: Int = Projections.filingBudget, sendsBudget: Int = Projections.sendsBudget,
        payloadsBudget: Int = Projections.payloadsBudget, part: Int? = nil,
        progress: ((_ done: Int, _ total: Int) -> Void)? = nil, isCancelled: (() -> Bool)? = nil
    ) throws {
        try log.env.write { txn in
            _ = try txn.delete(index, Self.builtKey)
            try txn.clear(facts)
            try txn.clear(recentFacts)
            try txn.clear(index)
            try txn.clear(state)
        }
        // Progress in events: filing counts as the first third of the work.
        let total = try log.eventCount()
        let filingShare = total / 3
        // Facts and sends to fold, known once they are filed: until then
        // (device bindings fold as the filing's last write ends), the
        // events, which file one each but for events of unknown kinds.
        var factTotal = total
        var folded = 0
        func foldedMore(_ count: Int) {
            folded += count
            progress?(filingShare + (total - filingShare) * min(folded, factTotal) / max(1, factTotal), total)
        }
        var deleted = FoldRun.DeletedObjects()
        // Classes in fold order; the next two slices' facts and payloads
        // are read and decoded (and, off the write transaction, folded)
        // while this one is written (`pipelined`), across class boundaries
        // too (a slice reads only `facts`, the log and the committed device
        // bindings, which folding does not write). Two at once, because
        // reading a slice is serial: one left a core idle while it read.
        // The write transaction is the one stage that cannot run on both
        // cores. Messages fold on their own.
        let order = ObjectClass.foldOrder
        // The entries of `Table.appendedAfterTheirClasses`, held until the
        // classes that make them are folded, a sorted run per part.
        var heldRuns: [SortedEntries] = []
        let messageAt = order.firstIndex(of: .message) ?? order.count
        func foldClasses(_ classes: ArraySlice<ObjectClass>, payloads: FiledPayloads, bindings: [Bytes32: DeviceBinding]? = nil) throws {
            guard let first = classes.first else { return }
            let classes = Array(classes)
            /// The first slice of the class after `cls`, once `cls` is done.
            @Sendable func following(_ cls: ObjectClass) -> SliceCursor? {
                guard let i = classes.firstIndex(of: cls), i + 1 < classes.count else { return nil }
                return SliceCursor(cls: classes[i + 1], after: nil)
            }
            try pipelined(from: SliceCursor(cls: first, after: nil)) { start in
                var cursor = start
                while true {
                    if let (plan, next) = try planSlice(cursor, limit: sliceSize) {
                        return (plan, next ?? following(cursor.cls))
                    }
                    guard let next = following(cursor.cls) else { return nil }  // a class without facts
                    cursor = next
                }
            } build: { [self] plan in
                try buildSlice(plan, part: part ?? 256, payloads: payloads, bindings: bindings)
            } consume: { slice in
                if isCancelled?() == true { throw CancellationError() }
                if let parts = slice.folded {
                    try write(parts, deleted: &deleted, appendStoredLast: true) { heldRuns.append($0) }
                } else {
                    deleted.absorb(try foldInWriteTransaction(slice))
                }
                foldedMore(slice.facts)
            }
        }
        // Device bindings are folded, and committed, on their own first: the
        // folds run off the write transaction read them, and a slice is
        // read while the slice before it (of any class, when the classes
        // between hold no facts) is still being written.
        let afterDevices = (order.firstIndex(of: .device) ?? -1) + 1
        // Their facts come first in `facts` (class byte 1): they are folded
        // as soon as the filing's last write has written them, while it
        // writes the other classes' facts and the index entries (§9.2).
        let firstBytes = Set(order[..<afterDevices].map(\.rawValue))
        let below = (firstBytes.max() ?? 0) + 1
        let foldsFirst = firstBytes == Set(ObjectClass.allCases.map(\.rawValue).filter { $0 < below })
        // Filing slices of 100,000 events by default: the last one's parts,
        // which end unevenly while nothing else runs, stay short (200,000
        // left a core idle for longer at the end of the filing).
        let (sends, payloads) = try fileInBulk(
            sliceSize: sliceSize * 5, budget: filingBudget, sendsBudget: sendsBudget, payloadsBudget: payloadsBudget,
            part: part ?? 4_096, isCancelled: isCancelled,
            foldingFirst: foldsFirst ? (below, { payloads in try foldClasses(order[..<afterDevices], payloads: payloads) }) : nil
        ) { filed in
            progress?(filingShare * filed / max(1, total), total)
        }
        if !foldsFirst { try foldClasses(order[..<afterDevices], payloads: payloads) }
        factTotal = try log.env.read { txn in try txn.count(facts) } + sends.count
        // Final from here on: the folds off the write transaction take
        // them from memory instead of reading and decoding them per part.
        let bindings = try allBindings()
        // The coin ledger reads only device bindings, and no other class
        // reads it, so it is folded beside them on a thread of its own: its
        // fold is one walk on one core, which at the end of the rebuild
        // overlapped nothing. The walk runs off the write transaction; held
        // in it, it stopped the other classes' writes for its whole length.
        let alone = Background { [self] in try foldCoinsAlone(payloads: payloads, bindings: bindings) }
        defer { _ = try? alone.wait() }  // nothing writes after a rebuild returns or throws
        func beside(_ classes: ArraySlice<ObjectClass>) -> ArraySlice<ObjectClass> { classes.filter { $0 != .coins }[...] }
        // Read markers and chat keys, folded off the write transaction too,
        // read memberships: their slices are read once every chat's is
        // written.
        let afterChats = min(messageAt, max(afterDevices, (order.firstIndex(of: .chat) ?? -1) + 1))
        try foldClasses(beside(order[afterDevices..<afterChats]), payloads: payloads, bindings: bindings)
        // The held entries (every edge's `edgeOut`, made by the classes
        // folded so far) are appended while markers and chat keys fold:
        // their stored table byte comes after `edge`'s and before
        // `message`'s, which the message pass appends (§9.1, §9.2).
        let held = heldRuns
        heldRuns = []
        let appendingHeld = Background { [self] in try SortedEntries.writeMerged(held, to: state, in: log.env, append: true) }
        defer { _ = try? appendingHeld.wait() }  // nothing writes after a rebuild returns or throws
        try foldClasses(beside(order[afterChats..<messageAt]), payloads: payloads, bindings: bindings)
        try appendingHeld.wait()
        // Held by classes folded since (none in this fold order): put.
        try SortedEntries.writeMerged(heldRuns, to: state, in: log.env, append: false)
        heldRuns = []
        if messageAt < order.count {
            try foldMessagesInBulk(
                sends, payloads: payloads, bindings: bindings, sliceSize: sliceSize, part: part ?? 256, isCancelled: isCancelled,
                deleted: &deleted, folded: foldedMore)
            try foldClasses(beside(order[(messageAt + 1)...]), payloads: payloads, bindings: bindings)
        }
        foldedMore(try alone.wait())
        if isCancelled?() == true { throw CancellationError() }
        try log.env.write { txn in
            try purge(deletedPictures: deleted.pictures, messages: [], decided: deleted.messagePurges, in: txn)
        }
        try log.env.write { txn in try txn.put(index, Self.builtKey, builtMarker) }
        progress?(total, total)
    }

    /// Folds the objects of `slice` (those `only` keeps) in bulk in one
    /// write transaction; returns the pictures and messages found deleted.
    func foldInWriteTransaction(
        _ slice: ObjectSlice, only: ((inout FoldRun, [Bytes32]) throws -> [Bytes32])? = nil
    ) throws -> FoldRun.DeletedObjects {
        try log.env.write { txn in
            var run = FoldRun(projections: self, txn: txn, purging: false, bulk: true)
            run.preloaded = slice.preloaded
            run.bulkFacts = (slice.cls, slice.loaded)
            run.consentsChecked = slice.consents
            try run.foldInBulk(slice.cls, try only?(&run, slice.objects) ?? slice.objects)
            return run.deletedInBulk
        }
    }

    /// Folds the coin ledger in bulk, beside the other classes (a
    /// rebuild's, §9.2): its walk runs in a read transaction of its own,
    /// off the write transaction, and its entries are then written in one
    /// short write transaction, so the other classes' writes never wait for
    /// the walk. Returns how many facts it folded. The ledger reads only
    /// device bindings and its own entries, and no other class reads it.
    func foldCoinsAlone(payloads: FiledPayloads, bindings: [Bytes32: DeviceBinding]) throws -> Int {
        // One object: the slice holds all of its facts, whatever the limit.
        guard let (slice, _) = try objectSlice(SliceCursor(cls: .coins, after: nil), limit: 1, payloads: payloads) else { return 0 }
        let part = try log.env.read { txn in
            var run = FoldRun(projections: self, txn: txn, purging: false, bulk: true)
            run.bufferedState = SortedEntries()
            run.bufferedDecisions = [:]
            run.bufferedIndex = SortedEntries()
            run.ledgerDecided = [:]
            run.knownBindings = bindings
            run.preloaded = slice.preloaded
            run.bulkFacts = (.coins, slice.loaded)
            try run.foldCoinsInBulk()
            return FoldedPart(run)
        }
        var deleted = FoldRun.DeletedObjects()
        try write([part], deleted: &deleted)
        return slice.facts
    }

    /// The filing pass of a rebuild (Specs/projections.md §9.2): reads the
    /// log in arrival order, `sliceSize` events at a time, decodes and files
    /// each slice on all cores into sorted runs, and holds the runs until
    /// they fill `budget` bytes (or the log ends); then writes them, merged
    /// in key order, to the emptied `facts`, `index` and `state`. The first
    /// write is appended (`MDB_APPEND`: pages filled in order, never split):
    /// when the whole log's entries fit the budget (a million events take
    /// about 180 MB) every table is written that way, once. A later write's
    /// keys interleave with earlier ones and are put in key order. Returns
    /// every `message.sent`, which it files not as facts but as a list in
    /// the order of their `message` entries, for the message pass (152 bytes
    /// a send, held beside the budget). Once the list would pass
    /// `sendsBudget` bytes, every send is filed in `index` instead, under
    /// `IndexTable.rebuildSend`, with the other entries (§9.2): the list
    /// grows with the log, the budgets do not.
    func fileInBulk(
        sliceSize: Int, budget: Int = Projections.filingBudget, sendsBudget: Int = Projections.sendsBudget,
        payloadsBudget: Int = Projections.payloadsBudget, part: Int = 4_096, isCancelled: (() -> Bool)?,
        foldingFirst: (below: UInt8, fold: (FiledPayloads) throws -> Void)? = nil, progress: (_ filed: Int) -> Void
    ) throws -> (sends: BulkSends, payloads: FiledPayloads) {
        var filed = 0
        var payloads = FiledPayloads()
        var payloadsFull = false
        var writes = 0
        var sends: [BulkSend] = []
        var filedSends: Int? = nil
        // Only the runs are held: a slice's sends and payloads go into
        // lists of their own as it comes (a held slice kept them twice).
        var heldFacts: [SortedEntries] = []
        var heldIndex: [SortedEntries] = []
        var heldSends: [SortedEntries] = []
        var heldBytes = 0
        func writeHeld() throws {
            guard !heldFacts.isEmpty || !heldIndex.isEmpty || !heldSends.isEmpty else { return }
            try SortedEntries.writeMerged(heldFacts, to: facts, in: log.env, append: writes == 0)
            try SortedEntries.writeMerged(heldIndex + heldSends, to: index, in: log.env, append: writes == 0)
            writes += 1
            heldFacts.removeAll()
            heldIndex.removeAll()
            heldSends.removeAll()
            heldBytes = 0
        }
        /// Files `list` (sorted) as one run of `index` entries, held with the
        /// others, and empties it before the run is sorted.
        func fileSends(_ list: inout [BulkSend]) throws {
            guard !list.isEmpty else { return }
            var run = SortedEntries()
            for send in list { run.add(send.indexKey, send.indexValue) }
            let count = list.count
            list = []
            run.sort()
            if heldBytes + run.memoryBytes > budget { try writeHeld() }
            heldSends.append(run)
            heldBytes += run.memoryBytes
            filedSends = (filedSends ?? 0) + count
        }
        // The next two slices are read and filed on all cores while this one
        // is taken in or written (`pipelined`): two at once, because the
        // parts of one slice do not end together, and a core waiting for
        // the last part of its slice takes parts of the next.
        let last = try log.lastArrival()
        try pipelined(from: UInt64(0), ahead: 2) { since -> (plan: ClosedRange<UInt64>, next: UInt64?)? in
            guard since < last else { return nil }
            let end = min(last, since &+ UInt64(max(1, sliceSize)))
            return ((since + 1)...end, end < last ? end : nil)
        } build: { [self] arrivals in
            try filingSlice(arrivals, part: part)
        } consume: { slice in
            if isCancelled?() == true { throw CancellationError() }
            let bytes = (slice.facts + slice.index).reduce(0) { $0 + $1.memoryBytes }
            if heldBytes + bytes > budget { try writeHeld() }
            heldFacts += slice.facts
            heldIndex += slice.index
            heldBytes += bytes
            if filedSends != nil {
                var list = slice.sends.sorted()
                try fileSends(&list)
            } else if (sends.count + slice.sends.count) * MemoryLayout<BulkSend>.stride > sendsBudget {
                // The list, sorted, and its run are the largest allocations
                // of a rebuild: the held runs are written first, and the
                // list is sorted in place and freed once its run is built
                // (the slice's sends are a run of their own).
                try writeHeld()
                sends.sort()
                try fileSends(&sends)
                var list = slice.sends.sorted()
                try fileSends(&list)
            } else {
                sends += slice.sends
            }
            // Kept in arrival order up to the budget; the class pass reads
            // the payloads past it from the log.
            for run in slice.payloads where !payloadsFull {
                if payloads.memoryBytes + run.memoryBytes > payloadsBudget {
                    payloadsFull = true
                } else {
                    payloads.append(run)
                }
            }
            filed += slice.events
            progress(filed)
        }
        if let (below, fold) = foldingFirst {
            // The facts under `below` first; then the rest, and the index
            // entries, are written on another thread while `fold` folds
            // those, and the sends are sorted (§9.2).
            let append = writes == 0
            try SortedEntries.writeMerged(heldFacts, below: below, to: facts, in: log.env, append: append)
            let (factRuns, indexRuns) = (heldFacts, heldIndex + heldSends)
            heldFacts = []
            heldIndex = []
            heldSends = []
            let rest = Background { [self] in
                try SortedEntries.writeMerged(factRuns, from: below, to: facts, in: log.env, append: append)
                try SortedEntries.writeMerged(indexRuns, to: index, in: log.env, append: append)
            }
            defer { _ = try? rest.wait() }  // nothing writes after a rebuild returns or throws
            try fold(payloads)
            if filedSends == nil { sends.sort() }
            try rest.wait()
        } else {
            try writeHeld()
            // Each part's sends are in order already: the sort merges runs.
            if filedSends == nil { sends.sort() }
        }
        if let filedSends { return (.filed(count: filedSends), payloads) }
        return (.held(sends), payloads)
    }

    /// The bytes of sends a rebuild's filing lists in memory before it files
    /// them in `index` instead (§9.2): about 880,000 sends (152 bytes
    /// each), the messages of about 1.9 million events of a social workload.
    public static let sendsBudget = 128 << 20

    /// The bytes of payloads a rebuild's filing keeps for the fold of the
    /// classes (`FiledPayloads`, §9.2): those of about a million events of
    /// a social workload (the payloads of follows', likes' and blocks' adds
    /// and of messages' sends are not kept: their folds do not read them).
    public static let payloadsBudget = 32 << 20

    /// The sends a rebuild's filing listed for its message pass: in memory,
    /// or filed in `index` under `IndexTable.rebuildSend` (§9.2).
    enum BulkSends {
        case held([BulkSend])
        case filed(count: Int)

        var count: Int {
            switch self {
            case .held(let list): list.count
            case .filed(let count): count
            }
        }
    }

    /// The bytes of sorted runs a rebuild's filing pass holds before it
    /// writes them (§9.2): enough for about a million events' entries, well
    /// inside the 1 GiB a rebuild may take.
    public static let filingBudget = 256 << 20

    /// One slice of the log filed into sorted runs of `facts` and `index`
    /// entries (one run per part of the slice, in filing order), with how
    /// many events it held and its sends (§9.2).
    struct FilingSlice: Sendable {
        let facts: [SortedEntries]
        let index: [SortedEntries]
        let events: Int
        let sends: [BulkSend]
        /// The payloads the fold of the classes reads, one run per part.
        let payloads: [FiledPayloads]
    }

    /// A `message.sent` as a rebuild's message pass takes it: ordered as its
    /// `message` entry's key (chat, time, id), with where the log holds it,
    /// its sending device and what its fold reads of the payload, taken
    /// when the filing decoded it: the pass does not read the log again.
    struct BulkSend: Sendable, Comparable {
        let chat: ObjectID
        let hlc: UInt64
        let id: EventID
        let arrival: UInt64
        let author: PublicKey
        let content: SentContent

        static func < (a: BulkSend, b: BulkSend) -> Bool { (a.chat, a.hlc, a.id) < (b.chat, b.hlc, b.id) }

        /// Its `index` key when filed (§9.2): in the same order as `<`.
        var indexKey: [UInt8] { IndexTable.rebuildSend.key(chat, Codec.u64(hlc), id) }

        /// Its `index` value when filed (§9.2): u64be(arrival) ‖ author ‖
        /// u8(0: purged, 1: held, 2: held with a picture) ‖ that picture's
        /// blob when 2.
        var indexValue: [UInt8] {
            var out = Codec.u64(arrival) + author.bytes
            if let blob = content.attachment {
                out.append(2)
                out += blob.bytes
            } else {
                out.append(content.held ? 1 : 0)
            }
            return out
        }

        /// The send's fact as its message's fold takes it, without its
        /// payload (`content` says what the fold reads of it).
        var fact: Fact {
            Fact(order: MergeOrder(hlc: HLC(rawValue: hlc), author: author, id: id), kind: .messageSent, object: chat, arrival: arrival, payload: nil)
        }

        /// A send filed in `index`, read back.
        init(indexKey key: [UInt8], value: [UInt8]) throws {
            guard key.count == 73, value.count == 41 && value[40] < 2 || value.count == 73 && value[40] == 2 else {
                throw ProjectionError.corrupt("rebuild send entry of \(key.count) + \(value.count) bytes")
            }
            self.init(
                chat: try Codec.b32(key[1..<33], "chat"), hlc: Codec.readU64(key[33..<41]), id: try Codec.b32(key[41..<73], "message id"),
                arrival: Codec.readU64(value[0..<8]), author: try Codec.b32(value[8..<40], "sending device"),
                content: SentContent(attachment: value.count == 73 ? try Codec.b32(value[41..<73], "blob") : nil, held: value[40] != 0))
        }

        /// The send of `event`, held at `arrival`.
        init(_ event: Event, arrival: UInt64) {
            self.init(
                chat: event.object, hlc: event.hlc.rawValue, id: event.id, arrival: arrival, author: event.author,
                content: SentContent(payload: event.payload))
        }

        init(chat: ObjectID, hlc: UInt64, id: EventID, arrival: UInt64, author: PublicKey, content: SentContent) {
            self.chat = chat
            self.hlc = hlc
            self.id = id
            self.arrival = arrival
            self.author = author
            self.content = content
        }
    }

    /// The events at `arrivals`, decoded and filed on all cores. Each
    /// part reads its own range of arrivals in a read transaction of its
    /// own, and is filed and sorted on its own core, and kept as its own
    /// run: merging them is left to the write, which merges runs anyway, so
    /// nothing here runs on one core.
    func filingSlice(_ arrivals: ClosedRange<UInt64>, part: Int) throws -> FilingSlice {
        let (since, end) = (arrivals.lowerBound - 1, arrivals.upperBound)
        let span = Int(end - since)
        // Two parts per core balance the load when a core is busy elsewhere,
        // and keep the runs the write merges few.
        let parts = max(1, min(span / max(1, part), 2 * ProcessInfo.processInfo.activeProcessorCount))
        let partSpan = UInt64((span + parts - 1) / parts)
        let chunks = stride(from: since, to: end, by: Int(partSpan)).map { ($0 + 1)...min(end, $0 + partSpan) }
        let filedChunks = parallelMap(chunks, chunk: 1) { range -> Result<(SortedRunSink, [BulkSend], FiledPayloads, Int), Error> in
            Result {
                var sink = SortedRunSink(factsDB: facts, indexDB: index)
                var none: FoldRun? = nil
                var sends: [BulkSend] = []
                var payloads = FiledPayloads()
                var count = 0
                try log.forEachTrusted(arrivals: range) { arrival, event in
                    let targets = try file(StoredEvent(event: event, arrival: arrival), into: &sink, run: &none)
                    if event.kind == .messageSent {
                        sends.append(BulkSend(event, arrival: arrival))
                    } else if targets.contains(where: { Self.bulkFoldReadsPayload($0.0, event.kind) }) {
                        payloads.add(arrival, event.payloadBytes)
                    }
                    count += 1
                }
                sink.facts.sort()
                sink.index.sort()
                sends.sort()
                return (sink, sends, payloads, count)
            }
        }
        var sinks: [SortedRunSink] = []
        var sends: [BulkSend] = []
        var payloads: [FiledPayloads] = []
        var events = 0
        for chunk in filedChunks {
            let (filedSink, filedSends, filedPayloads, filedEvents) = try chunk.get()
            sinks.append(filedSink)
            sends += filedSends
            payloads.append(filedPayloads)
            events += filedEvents
        }
        return FilingSlice(facts: sinks.map(\.facts), index: sinks.map(\.index), events: events, sends: sends, payloads: payloads)
    }

    /// The messages of a bulk rebuild (Specs/projections.md §9.2): every
    /// send the filing listed (`sends`, in the order of the chats' message
    /// entries: chat, time, id), read
    /// from the log in arrival order and decoded on all cores, each folded
    /// once with its edits and deletion; then the edits and deletions of
    /// messages this node does not hold. `folded` counts what each slice
    /// folded, for progress. Held messages are folded in parts of at least
    /// `part` messages, one core each, off the write transaction
    /// (`foldedMessages`).
    func foldMessagesInBulk(
        _ sends: BulkSends, payloads: FiledPayloads, bindings: [Bytes32: DeviceBinding], sliceSize: Int, part: Int,
        isCancelled: (() -> Bool)?, deleted: inout FoldRun.DeletedObjects, folded: (Int) -> Void
    ) throws {
        // Every message's edits and deletions (a few percent of the log),
        // read in one scan: looking each held message up would cost a seek
        // per message, nearly always finding nothing.
        var rawEdits: [EventID: [(key: [UInt8], value: [UInt8])]] = [:]
        // A rebuild files every fact into the main level (`facts`).
        try log.env.read { txn in
            try txn.scan(facts, prefix: [ObjectClass.message.rawValue]) { key, value in
                rawEdits[try Codec.b32(key[1..<33], "message id"), default: []].append((key, value))
                return true
            }
        }
        let edits = rawEdits
        // The next slice of sends is read and folded on all cores while this
        // one is written (`pipelined`).
        let perSlice = max(1, sliceSize)
        let fold: @Sendable ([BulkSend]) throws -> MessageSlice = { slice in
            MessageSlice(messages: slice.count, parts: try self.foldedMessages(slice, edits: edits, payloads: payloads, bindings: bindings, part: part))
        }
        func consume(_ slice: MessageSlice) throws {
            if isCancelled?() == true { throw CancellationError() }
            try write(slice.parts, deleted: &deleted, appendStoredLast: true)
            var editFacts = 0
            for message in slice.parts.flatMap(\.editedMessages) { editFacts += rawEdits.removeValue(forKey: message)?.count ?? 0 }
            folded(slice.messages + editFacts)
        }
        switch sends {
        case .held(let list):
            try pipelined(from: 0) { (start: Int) throws -> (output: MessageSlice, next: Int?)? in
                guard start < list.count else { return nil }
                let end = min(list.count, start + perSlice)
                return (try fold(Array(list[start..<end])), end < list.count ? end : nil)
            } consume: { try consume($0) }
        case .filed:
            // Read back in key order, a slice at a time after the last key
            // read; the write transactions between write no such key.
            let prefix = [IndexTable.rebuildSend.rawValue]
            try pipelined(from: prefix) { (after: [UInt8]) throws -> (output: MessageSlice, next: [UInt8]?)? in
                var slice: [BulkSend] = []
                var last: [UInt8]? = nil
                try log.env.read { txn in
                    try txn.scan(index, from: after) { key, value in
                        guard key.starts(with: prefix) else { return false }
                        if key == after { return true }
                        slice.append(try BulkSend(indexKey: key, value: value))
                        last = key
                        return slice.count < perSlice
                    }
                }
                guard let last else { return nil }
                return (try fold(slice), slice.count < perSlice ? nil : last)
            } consume: { try consume($0) }
            // None may outlast the rebuild; deleted a bounded number at a
            // time, so the keys held stay within the budget too.
            let chunk = 65_536
            while try log.env.write({ txn in try txn.deletePrefix(index, prefix, limit: chunk) }) == chunk {}
        }
        // What remains are the edits and deletions of messages whose send
        // the log does not hold (every send is listed): usually none.
        let unknown = rawEdits.keys.sorted()
        for start in stride(from: 0, to: unknown.count, by: perSlice) {
            if isCancelled?() == true { throw CancellationError() }
            let objects = Array(unknown[start..<min(unknown.count, start + perSlice)])
            let entries = objects.flatMap { object in (rawEdits[object] ?? []).map { (object: object, key: $0.key, value: $0.value) } }
            let plan = SlicePlan(
                cls: .message, objects: objects, entries: entries,
                arrivals: entries.compactMap { Fact.arrival(ofValue: $0.value) })
            let slice = try buildSlice(plan, part: nil, payloads: payloads)
            _ = try foldInWriteTransaction(slice)
            folded(slice.facts)
        }
    }

    /// One slice of held messages, folded off the write transaction: how
    /// many, and what the folds of its parts decided.
    struct MessageSlice: Sendable {
        let messages: Int
        let parts: [FoldedPart]
    }

    /// What the bulk folds of one part of a slice, run off the write
    /// transaction, decided, to be written: their state entries (sorted),
    /// the reasons of their events that take no effect, the change to each
    /// chat's message count, and the pictures and messages found deleted.
    struct FoldedPart: Sendable {
        let state: SortedEntries
        let index: SortedEntries
        let decisions: [UInt64: [UInt8]]
        let counts: [ObjectID: Int]
        let deleted: FoldRun.DeletedObjects
        /// The messages of a part of held messages that have edits or a
        /// deletion, folded with them.
        let editedMessages: [EventID]

        /// What `run`, which folded a part off the write transaction, decided.
        init(_ run: FoldRun) {
            var state = run.bufferedState ?? SortedEntries()
            state.sort()
            self.state = state
            var index = run.bufferedIndex ?? SortedEntries()
            index.sort()
            self.index = index
            decisions = run.bufferedDecisions ?? [:]
            counts = run.messageCountDeltas
            deleted = run.deletedInBulk
            editedMessages = run.bulkMessageEdits.map { Array($0.keys) } ?? []
        }
    }

    /// Writes, in one write transaction, what the parts of a slice folded
    /// off it decided. The parts hold consecutive objects in key order, so
    /// their entries are written nearly in key order. With
    /// `appendStoredLast` (a bulk rebuild's, which folds the tables stored
    /// after every other, `Table.storedLast`, in their order and each in
    /// key order, §9.2), the entries of those tables are written as LMDB
    /// appends. With `hold`, the entries of the tables a rebuild appends
    /// once their classes are folded (`Table.appendedAfterTheirClasses`)
    /// are handed to it, a sorted run per part, instead of written; without,
    /// they are written as the others (for folds that make none, or
    /// without `appendStoredLast`).
    func write(
        _ parts: [FoldedPart], deleted: inout FoldRun.DeletedObjects, appendStoredLast: Bool = false,
        hold: ((SortedEntries) -> Void)? = nil
    ) throws {
        // Each part's held entries, handed on before the transaction (whose
        // body runs again if the map grows) and skipped in it.
        let heldTables = Table.appendedAfterTheirClasses
        let held: [Range<Int>] = parts.map { part in
            guard hold != nil else { return part.state.count..<part.state.count }
            return part.state.firstIndex(startingWithAtLeast: heldTables.lowerBound)
                ..< part.state.firstIndex(startingWithAtLeast: heldTables.upperBound)
        }
        if let hold { for (part, range) in zip(parts, held) where !range.isEmpty { hold(part.state.copy(range)) } }
        try log.env.write { txn in
            var run = FoldRun(projections: self, txn: txn, purging: false, bulk: true)
            for (part, held) in zip(parts, held) {
                let last = part.state.firstIndex(startingWithAtLeast: Table.storedLast[0].stored)
                try part.state.write(0..<last, to: state, in: txn, append: false)
                try part.state.write(last..<max(last, held.lowerBound), to: state, in: txn, append: appendStoredLast)
                try part.state.write(max(last, held.upperBound)..<part.state.count, to: state, in: txn, append: appendStoredLast)
                try part.index.write(0..<part.index.count, to: index, in: txn, append: false)
                for (chat, delta) in part.counts { run.countMessage(in: chat, by: delta) }
            }
            for (arrival, reason) in parts.flatMap(\.decisions).sorted(by: { $0.key < $1.key }) {
                try txn.put(state, Self.noEffectKey(arrival), reason)
            }
            try run.writeMessageCounts()
        }
        for part in parts { deleted.absorb(part.deleted) }
    }

    /// Runs `fold` over `items` in consecutive parts of at least `part`
    /// items on all cores, each part with a `FoldRun` of its own in a read
    /// transaction of its own, whose writes are collected (§9.2). With
    /// `bindings` (every device binding, once they are final), the runs
    /// take bindings from it (`FoldRun.knownBindings`).
    func foldedInParts<Item: Sendable>(
        _ items: [Item], part: Int, bindings: [Bytes32: DeviceBinding]? = nil,
        _ fold: @escaping @Sendable (inout FoldRun, ArraySlice<Item>, Transaction) throws -> Void
    ) throws -> [FoldedPart] {
        let parts = max(1, min(items.count / max(1, part), 2 * ProcessInfo.processInfo.activeProcessorCount))
        let size = (items.count + parts - 1) / parts
        let ranges = stride(from: 0, to: items.count, by: size).map { $0..<min(items.count, $0 + size) }
        return try parallelMap(ranges, chunk: 1) { range in
            Result {
                try log.env.read { txn in
                    var run = FoldRun(projections: self, txn: txn, purging: false, bulk: true)
                    run.bufferedState = SortedEntries()
                    run.bufferedIndex = SortedEntries()
                    run.bufferedDecisions = [:]
                    run.knownBindings = bindings
                    try fold(&run, items[range], txn)
                    return FoldedPart(run)
                }
            }
        }.map { try $0.get() }
    }

    /// Folds held messages (`sends`, in the order of their `message`
    /// entries) in consecutive parts on all cores, each part in its own read
    /// transaction, off the write transaction: a part takes its sends as
    /// the filing listed them (the log is not read again for them), loads
    /// their edits and deletions (`edits`: raw `facts` entries by message),
    /// and folds each message. A message's fold reads only its own facts (in hand) and state
    /// that every class folded before messages wrote and committed
    /// (memberships, device bindings), and the bulk fold writes nothing
    /// that another message's fold reads (Specs/projections.md §9.2).
    func foldedMessages(
        _ sends: [BulkSend], edits: [EventID: [(key: [UInt8], value: [UInt8])]], payloads: FiledPayloads,
        bindings: [Bytes32: DeviceBinding], part: Int
    ) throws -> [FoldedPart] {
        try foldedInParts(sends, part: part, bindings: bindings) { run, part, txn in
            let held = part.compactMap { send in edits[send.id].map { (send.id, $0) } }
            let preloaded = try PreloadedPayloads.load(
                held.flatMap { $0.1.compactMap { Fact.arrival(ofValue: $0.value) } }, log: log, filed: payloads)
            var loaded: [EventID: [Fact]] = [:]
            for (message, entries) in held {
                loaded[message] = try entries.map { try Fact.load(key: $0.key, value: $0.value, log: log, in: txn, preloaded: preloaded) }
            }
            run.bulkMessageEdits = loaded
            for send in part { try run.foldMessage(send.id, held: (send.fact, send.content)) }
        }
    }

    /// Where the next slice of a class's objects starts: after `after`.
    struct SliceCursor: Sendable {
        let cls: ObjectClass
        let after: Bytes32?
    }

    /// The objects of one slice of a bulk fold and their raw facts
    /// (`planSlice`), before their payloads are read.
    struct SlicePlan: Sendable {
        let cls: ObjectClass
        let objects: [Bytes32]
        let entries: [(object: Bytes32, key: [UInt8], value: [UInt8])]
        let arrivals: [UInt64]
    }

    /// One slice of a bulk fold, read ahead: up to `limit` objects of a
    /// class in key order, how many facts they have, and those facts'
    /// payloads decoded.
    struct ObjectSlice: Sendable {
        let cls: ObjectClass
        let objects: [Bytes32]
        let facts: Int
        let preloaded: PreloadedPayloads
        /// Each object's facts in merge order, with their payloads.
        let loaded: [Bytes32: [Fact]]
        /// For device bindings, whether each `device.added` fact's consent
        /// signature verifies (`FoldRun.consentsChecked`).
        let consents: [EventID: Bool]?
        /// What the folds of the slice decided, when it was folded off the
        /// write transaction (`foldedInParts`); nil when it is folded in it.
        let folded: [FoldedPart]?
    }

    /// How a rebuild folds an object of `cls` in parts off the write
    /// transaction, as it reads the slice (`objectSlice`); nil for a class
    /// folded in it. No default: a new class does not compile until it is
    /// placed here.
    static func foldOffTheWriteTransaction(_ cls: ObjectClass) -> (@Sendable (inout FoldRun, Bytes32) throws -> Void)? {
        switch cls {
        case .profile: { run, user in try run.foldProfile(user) }
        case .picture: { run, picture in try run.foldPicture(picture) }
        case .slots: { run, user in try run.foldSlots(user) }
        case .follow, .like, .block: { run, object in try run.foldRelationship(cls, object) }
        case .chat: { run, chat in _ = try run.foldChat(chat) }
        case .reads: { run, chat in try run.foldReads(chat) }
        case .chatKeys: { run, chat in try run.foldChatKeys(chat) }
        case .device, .deviceKey, .message, .coins: nil
        }
    }

    /// The slice of `cls` after `cursor` and the cursor of the next (nil
    /// after the last), or nil when none is left.
    func objectSlice(
        _ cursor: SliceCursor, limit: Int, part: Int? = nil, payloads: FiledPayloads
    ) throws -> (output: ObjectSlice, next: SliceCursor?)? {
        guard let (plan, next) = try planSlice(cursor, limit: limit) else { return nil }
        return (try buildSlice(plan, part: part, payloads: payloads), next)
    }

    /// Which objects and facts the slice at `cursor` holds (up to `limit`
    /// objects, or about `limit` facts), and where the next one starts:
    /// the cheap part of `objectSlice`, which says what follows.
    func planSlice(_ cursor: SliceCursor, limit: Int) throws -> (plan: SlicePlan, next: SliceCursor?)? {
        let (objects, entries, arrivals) = try objectsToFold(cursor.cls, after: cursor.after, limit: limit)
        guard let last = objects.last else { return nil }
        let plan = SlicePlan(cls: cursor.cls, objects: objects, entries: entries, arrivals: arrivals)
        return (plan, objects.count < limit && entries.count < limit ? nil : SliceCursor(cls: cursor.cls, after: last))
    }

    /// The facts of `plan` loaded with their payloads and, for the classes
    /// folded off the write transaction, folded in parts of `part` objects.
    func buildSlice(_ plan: SlicePlan, part: Int?, payloads: FiledPayloads, bindings: [Bytes32: DeviceBinding]? = nil) throws -> ObjectSlice {
        let (cls, objects, entries) = (plan.cls, plan.objects, plan.entries)
        let preloaded = try PreloadedPayloads.load(plan.arrivals, log: log, filed: payloads)
        let loaded: [Bytes32: [Fact]] = try log.env.read { txn in
            var out: [Bytes32: [Fact]] = [:]
            out.reserveCapacity(objects.count)
            for (object, key, value) in entries {
                out[object, default: []].append(
                    try Fact.load(
                        key: key, value: value, log: log, in: txn, preloaded: preloaded,
                        withPayload: Self.bulkFoldReadsPayload(cls, factValue: value)))
            }
            return out
        }
        // Profiles, pictures, follows, likes, blocks, lock slots and chats
        // are folded here, in parts on all cores, off the write transaction:
        // an object's fold reads only its own facts (in hand) and device
        // bindings, and writes only the object's own entries (§6.2–§6.5,
        // §6.8, §9.2). Device bindings are committed: the rebuild folds them
        // before any other class. Read markers and chat keys read
        // memberships too, which the rebuild commits before it reads their
        // first slice.
        var folded: [FoldedPart]? = nil
        if let part, let fold = Self.foldOffTheWriteTransaction(cls) {
            folded = try foldedInParts(objects, part: part, bindings: bindings) { run, objects, _ in
                run.preloaded = preloaded
                run.bulkFacts = (cls, loaded)
                for object in objects { try fold(&run, object) }
            }
        }
        // A binding's consent is a signature to verify: on all cores here,
        // not one by one in the write transaction.
        var consents: [EventID: Bool]? = nil
        if cls == .device {
            let adds = loaded.values.flatMap { $0.filter { $0.kind == .deviceAdded } }
            consents = Dictionary(zip(adds.map(\.id), parallelMap(adds, chunk: 16, FoldRun.deviceConsents)), uniquingKeysWith: { a, _ in a })
        }
        return ObjectSlice(
            cls: cls, objects: objects, facts: entries.count, preloaded: preloaded, loaded: loaded, consents: consents, folded: folded)
    }

    /// Whether the bulk fold of `cls` reads the payload of its facts of
    /// `kind`: a slice loads only those (Specs/projections.md §9.2). No
    /// default: a new class does not compile until it says.
    static func bulkFoldReadsPayload(_ cls: ObjectClass, _ kind: EventKind) -> Bool {
        switch cls {
        case .follow, .like, .block: FoldRun.relationshipReadsPayload(kind)
        case .device, .profile, .picture, .chat, .reads, .message, .slots, .coins, .deviceKey, .chatKeys: true
        }
    }

    /// `bulkFoldReadsPayload` of the kind a `facts` value names; true for
    /// one it names none of (`Fact.load` reports it as damage).
    static func bulkFoldReadsPayload(_ cls: ObjectClass, factValue: [UInt8]) -> Bool {
        Fact.kind(ofValue: factValue).map { bulkFoldReadsPayload(cls, $0) } ?? true
    }

    /// Up to `limit` objects of class `cls` after `after`, in key order, how
    /// many facts they hold, and the arrival positions of those whose
    /// payloads the fold reads (`bulkFoldReadsPayload`).
    func objectsToFold(
        _ cls: ObjectClass, after: Bytes32?, limit: Int
    ) throws -> (objects: [Bytes32], facts: [(object: Bytes32, key: [UInt8], value: [UInt8])], arrivals: [UInt64]) {
        try log.env.read { txn in
            var objects: [Bytes32] = []
            var facts: [(object: Bytes32, key: [UInt8], value: [UInt8])] = []
            var arrivals: [UInt64] = []
            let start = after.map { [cls.rawValue] + $0.bytes + [UInt8](repeating: 0xFF, count: 73) } ?? [cls.rawValue]
            // A rebuild files every fact into the main level (`facts`).
            try txn.scan(self.facts, from: start) { key, value in
                guard key.first == cls.rawValue, key.count == 105 else { return false }
                let object = try Codec.b32(key[1..<33], "object")
                if objects.last != object {
                    // Whole objects only; `limit` objects or about `limit`
                    // facts (one object's facts may take it over).
                    if objects.count == limit || facts.count >= limit { return false }
                    objects.append(object)
                }
                facts.append((object, key, value))
                if let arrival = Fact.arrival(ofValue: value), Self.bulkFoldReadsPayload(cls, factValue: value) {
                    arrivals.append(arrival)
                }
                return true
            }
            return (objects, facts, arrivals)
        }
    }

    /// Purges the payloads (and unused blobs) of every picture and message
    /// the final state holds as deleted: the end of a whole-log fold.
    public func purgeDeleted(in txn: Transaction) throws {
        var pictures: [ObjectID] = []
        try txn.scan(state, prefix: [Table.picture.rawValue]) { key, value in
            if try PictureRecord.decode(value).deleted != nil { pictures.append(try Codec.b32(key[1...], "picture id")) }
            return true
        }
        var messages: [EventID] = []
        try txn.scan(state, prefix: [Table.message.rawValue]) { key, value in
            if try MessageEntry.decode(value).deleted != nil {
                messages.append(try Codec.b32(key.suffix(32), "message id"))
            }
            return true
        }
        try purge(deletedPictures: pictures, messages: messages, in: txn)
    }

    /// Purges the payloads (and unused blobs) of these deleted pictures and
    /// messages, and what a bulk fold already `decided` to purge.
    func purge(deletedPictures pictures: [ObjectID], messages: [EventID], decided: Purges = Purges(), in txn: Transaction) throws {
        var run = FoldRun(projections: self, txn: txn)
        for picture in pictures { run.purgeContent(of: picture, try run.facts(.picture, picture)) }
        for message in messages { try run.purgeContent(ofMessage: message, try run.messageFacts(message).all) }
        run.purges.add(decided)
        try carryOut(run.purges, in: txn)
    }

    /// Every device binding of the committed state (Specs/projections.md
    /// §5, `device`), by device key.
    func allBindings() throws -> [Bytes32: DeviceBinding] {
        try log.env.read { txn in
            var out: [Bytes32: DeviceBinding] = [:]
            try txn.scan(state, prefix: [Table.device.rawValue]) { key, value in
                out[try Codec.b32(key[1...], "device key")] = try DeviceBinding.decode(value)
                return true
            }
            return out
        }
    }

    /// The index key recording which projection format and network
    /// configuration the state was built with.
    static let builtKey: [UInt8] = [0xFF] + Array("built".utf8)
    /// The index key holding the last fact key moved from the recent level
    /// into the main one (Specs/projections.md §9.1).
    static let factsMergedKey: [UInt8] = [0xFF] + Array("facts_merged".utf8)
    /// 2: chat encryption (device and chat keys, sealed chat content) and
    /// the retired profile field `visibility`. 3: facts reference the log by
    /// arrival position instead of copying payloads. 4: the coin ledger's
    /// incremental decisions and their index entries (§6.9.1). 5: a chat's
    /// messages indexed by time (chat, hlc, id) instead of by id. 6: a
    /// `message.sent` is named by that index, with its arrival position,
    /// instead of being filed as a fact. 7: a `message` record is stored as
    /// an entry naming the log's payloads instead of copying the sealed body.
    /// 8: every held send has a `message` entry (withdrawn when it takes no
    /// effect), which replaces the chat message index. 9: a fact's value
    /// leaves out the header object when it is the object filed under.
    /// 10: no index entry per relationship add (a removal finds the adds it
    /// names through the log's id index). 11: a withdrawn send's no-effect
    /// record is kept in its message entry, not under its own key.
    /// 12: facts in two levels, a recent one each commit writes and a main
    /// one it is merged into (`facts_recent`, §9.1). 13: no-effect records
    /// are stored under the event's arrival position, not its id (§9.1).
    /// 14: a `message` entry leaves out the sender, read from the device's
    /// binding (§9.1). 15: an `edge` entry holds its live adds' arrival
    /// positions, not their ids (§9.1). 16: `message` entries are stored
    /// under the table byte 0xFE, after every other table (§9.1). 17: and
    /// `edge` entries under 0xFD (§9.1). 18: `edge` entries under 0xFC and
    /// `edgeOut` entries under 0xFD (§9.1). 19: `payloadGap` index entries
    /// name the live pictures and messages held without their payload
    /// (§9.1). 20: `blobWanted` index entries name the blobs that live
    /// objects reference and this node lacks (§9.1). 21: users' relay
    /// lists (`relays.set`) in the `relays` table (§6.12). 22: the built
    /// marker also names the layout (`layoutFingerprint`, §9.1).
    public static let formatVersion: UInt64 = 22

    var builtMarker: [UInt8] { Codec.u64(Self.formatVersion) + config.fingerprint.bytes + Self.layoutFingerprint.bytes }

    /// Names the registered layout: every object class with its byte and
    /// place in the fold order, every state and index table with its byte.
    /// It is part of the built marker, so state built with another layout
    /// (a class or table added, moved or renumbered) is rebuilt on open
    /// even when `formatVersion` was not bumped; a changed rule over the
    /// same layout still needs the bump.
    package static let layoutFingerprint: Hash32 = {
        var description = "chorus/projections/layout"
        for cls in ObjectClass.allCases { description += " class:\(cls):\(cls.rawValue):\(cls.foldRank)" }
        for table in Table.allCases { description += " state:\(table):\(table.rawValue)" }
        for table in IndexTable.allCases { description += " index:\(table):\(table.rawValue)" }
        return Blake2b.hash256(Array(description.utf8))
    }()

    /// Whether the state was built by this format with this configuration
    /// (false for a store from before projections, or after the network
    /// configuration changed): then it must be rebuilt before use.
    public func isCurrent() throws -> Bool { try staleness() == nil }

    /// Why the stored state is not this format's with this configuration,
    /// or nil when it is (`isCurrent()`). A reader of stale state would read
    /// records of another layout as this one's: tools that read a store
    /// without rebuilding it refuse it instead.
    public func staleness() throws -> Staleness? {
        try log.env.read { txn in
            guard let marker = try txn.get(index, Self.builtKey) else { return .neverBuilt }
            if marker == builtMarker { return nil }
            guard marker.count >= 8 else { return .neverBuilt }
            let format = Codec.readU64(marker[0..<8])
            guard format == Self.formatVersion else { return .format(format) }
            let built = Array(marker.dropFirst(8))
            let expected = Array(builtMarker.dropFirst(8))
            guard built.count == expected.count, built.suffix(32) == expected.suffix(32) else { return .layout }
            return .configuration
        }
    }

    /// Marks the state stale, so the next read-write open rebuilds it from
    /// the log (after changing fold rules by hand; tests).
    public func markStale() throws {
        try log.env.write { txn in _ = try txn.delete(index, Self.builtKey) }
    }

    /// Marks the projections of `env` stale without opening them (after a
    /// store format upgrade): the next read-write open folds the log again.
    public static func markStale(env: Environment) throws {
        let index = try env.openDatabase("index")
        try env.write { txn in _ = try txn.delete(index, builtKey) }
    }

    /// Rebuilds the projections unless they are current (`isCurrent()`);
    /// returns whether it rebuilt. `progress` is passed to `rebuild`.
    public func rebuildIfNeeded(progress: ((_ done: Int, _ total: Int) -> Void)? = nil) throws -> Bool {
        if try isCurrent() { return false }
        try rebuild(progress: progress)
        return true
    }

    /// BLAKE2b-256 over the network configuration and every entry of the
    /// projected state in key order (Specs/projections.md §8).
    public func digest() throws -> Hash32 { try digest(splitAbove: Self.digestSplitEntries) }

    /// `digest()`, with the state's entries turned into the digest's stream
    /// in batches on threads of their own (`digestInParts`) when it holds
    /// more than `splitAbove` entries; in one read on this thread otherwise.
    public func digest(splitAbove: Int) throws -> Hash32 {
        try log.env.readSnapshot(count: Self.digestReaders) { txns in
            try txns[0].count(state) > splitAbove ? digestInParts(txns) : digest(in: txns[0])
        }
    }

    /// Read transactions a split digest takes (`digestInParts`): one walks
    /// the state, two turn its batches into streams on threads of their own.
    static let digestReaders = 3

    /// State entries past which `digest()` splits its work: a split costs a
    /// thread per batch, well under a millisecond each, which a small
    /// store's whole digest does not take.
    public static let digestSplitEntries = 50_000

    /// The digest of `digest()`, from transactions on one snapshot: the
    /// first reads the state's entries in key order, a batch at a time (a
    /// cheap walk); the others each turn a batch into its stream on a
    /// thread of their own (the costly part: a message's payloads and an
    /// edge's ids are read from the log, a message's record decoded and
    /// encoded), batch `i` with `txns[1 + i % (txns.count - 1)]`, whose
    /// previous batch is done by then (`pipelined`); the calling thread
    /// hashes the streams in order. The same stream as `digest(in:)`.
    func digestInParts(_ txns: [Transaction], batch: Int = Projections.digestBatch) throws -> Hash32 {
        guard txns.count > 2 else { return try digest(in: txns[0]) }
        let walker = txns[0]
        let readers = SnapshotReaders(Array(txns[1...]))
        let hasher = Blake2b.Hasher()
        hasher.update(digestPrefix)
        var noEffects: [(key: [UInt8], value: [UInt8])] = []
        var batches = 0
        typealias Batch = (index: Int, entries: [(key: [UInt8], value: [UInt8])])
        try pipelined(from: [UInt8]?.none, ahead: readers.count) { after -> (plan: Batch, next: [UInt8]??)? in
            var entries: [(key: [UInt8], value: [UInt8])] = []
            entries.reserveCapacity(batch)
            try scanStateInOrder(walker, after: after) { key, value in
                entries.append((key, value))
                return entries.count < batch
            }
            guard let last = entries.last else { return nil }
            batches += 1
            return ((batches - 1, entries), entries.count < batch ? nil : .some(last.key))
        } build: { [self] batch -> (stream: [UInt8], noEffects: [(key: [UInt8], value: [UInt8])]) in
            var stream = DigestStream()
            var found: [(key: [UInt8], value: [UInt8])] = []
            try stateEntries(batch.entries, in: readers[batch.index], noEffects: &found) { stream.append($0, $1) }
            return (stream.bytes, found)
        } consume: { part in
            hasher.update(part.stream)
            noEffects += part.noEffects
        }
        var stream = DigestStream()
        try Self.sortedNoEffects(noEffects) { stream.append($0, $1) }
        hasher.update(stream.bytes)
        return hasher.finish()
    }

    /// What a digest's stream starts with (§8): its domain and the network
    /// configuration's fingerprint.
    var digestPrefix: [UInt8] { Array("chorus/projections/v1".utf8) + [0] + config.fingerprint.bytes }

    /// State entries a batch of `digestInParts` holds.
    static let digestBatch = 8_192

    /// A digest's stream of §8: each entry as u64be(key length) ‖ key ‖
    /// u64be(value length) ‖ value.
    struct DigestStream {
        var bytes: [UInt8] = []

        mutating func append(_ key: [UInt8], _ value: [UInt8]) {
            withUnsafeBytes(of: UInt64(key.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes += key
            withUnsafeBytes(of: UInt64(value.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes += value
        }
    }

    /// Read transactions of one snapshot handed to the threads of a split
    /// read. `@unchecked Sendable`: LMDB lets a read transaction move
    /// between threads (`MDB_NOTLS`) as long as one uses it at a time,
    /// which the caller arranges.
    struct SnapshotReaders: @unchecked Sendable {
        private let txns: [Transaction]
        init(_ txns: [Transaction]) { self.txns = txns }
        var count: Int { txns.count }
        subscript(_ i: Int) -> Transaction { txns[i % txns.count] }
    }

    /// The digest of `digest()` inside the caller's transaction, so it covers
    /// state that transaction wrote (Specs/projections.md §8).
    public func digest(in txn: Transaction) throws -> Hash32 {
        let hasher = OrderedHashing()
        defer { hasher.stop() }
        try hasher.update(digestPrefix)
        // The entries' bytes are gathered and hashed a MiB at a time on
        // another thread while the scan gathers the next: the hash of a
        // stream does not depend on how it is cut, and most entries are a
        // few dozen bytes.
        let chunk = 1 << 20
        var pending = DigestStream()
        try scanState(in: txn) { key, value in
            pending.append(key, value)
            if pending.bytes.count >= chunk {
                try hasher.update(pending.bytes)
                pending = DigestStream()
            }
        }
        try hasher.update(pending.bytes)
        return try hasher.finish()
    }

    /// One BLAKE2b-256 stream fed in order, each part hashed on a thread of
    /// its own while the caller gathers the next (`Background`): a
    /// digest's scan and its hashing, each about half of its time on one
    /// core, overlap. `@unchecked Sendable`: one part is hashed at a time
    /// (each waits for the one before), and only the caller's thread calls
    /// in.
    final class OrderedHashing: @unchecked Sendable {
        private let hasher = Blake2b.Hasher()
        private var running: Background<Void>? = nil

        /// Hashes `bytes` after every part before it.
        func update(_ bytes: [UInt8]) throws {
            try running?.wait()
            running = Background { [self] in hasher.update(bytes) }
        }

        /// The hash of every part, once each is hashed.
        func finish() throws -> Hash32 {
            try running?.wait()
            running = nil
            return hasher.finish()
        }

        /// Waits for the part being hashed, if any (after a failed scan).
        func stop() { _ = try? running?.wait() }
    }

    /// Whether the `state` database read in `txn` holds exactly the entries
    /// of `other`'s read in `otherTxn`, byte for byte. Stored message
    /// entries name arrival positions (§9.1), so this is a comparison of
    /// records only between stores that hold the same log at the same
    /// positions (a copy as stored); there, equal stored state means equal
    /// digests, without expanding a message.
    public func storesSameState(in txn: Transaction, as other: Projections, in otherTxn: Transaction) throws -> Bool {
        try txn.hasSameEntries(state, as: other.state, in: otherTxn)
    }

    /// Every state entry in key order (for diffs and tests), as
    /// Specs/projections.md §5 defines it.
    public func stateEntries(in txn: Transaction) throws -> [(key: [UInt8], value: [UInt8])] {
        var out: [([UInt8], [UInt8])] = []
        try scanState(in: txn) { out.append(($0, $1)) }
        return out
    }

    /// The state of Specs/projections.md §5 in key order: every entry as
    /// stored, except `message` records, which the store keeps as entries
    /// naming the log's payloads (§9.1) and which are expanded here, and
    /// the `noEffect` records, which the store keys by arrival position and
    /// which withdrawn sends' entries hold (§9.1), keyed here by event id.
    ///
    /// The payloads are read in the scan, then decoded and the records
    /// encoded on all cores, a slice of messages at a time: every digest
    /// (`chorus-replay verify` takes one) expands every message.
    func scanState(in txn: Transaction, _ body: ([UInt8], [UInt8]) throws -> Void) throws {
        // The no-effect records of §5, keyed by event id: the withdrawn
        // sends' (their entries hold them) and the stored ones (keyed by
        // arrival, §9.1), put in key order once the scan has passed every
        // other table (`noEffect` is the last).
        var noEffects: [(key: [UInt8], value: [UInt8])] = []
        try stateEntries(in: txn, noEffects: &noEffects, body) { entry in
            try scanStateInOrder(txn, after: nil) { key, value in
                try entry(key, value)
                return true
            }
        }
        try Self.sortedNoEffects(noEffects, body)
    }

    /// Scans the stored `state` in `txn` in the order of §5's keys
    /// (`Table.stateOrder`: the `message` entries, stored last, where §5
    /// puts them), from after the stored key `after` (from the first:
    /// nil), while `body` returns true.
    func scanStateInOrder(_ txn: Transaction, after: [UInt8]?, _ body: ([UInt8], [UInt8]) throws -> Bool) throws {
        let ranges = Table.stateOrder
        var i = 0
        if let first = after?.first {
            i = ranges.firstIndex { UInt16(first) >= $0.from && UInt16(first) < $0.to } ?? ranges.count
        }
        var going = true
        var resume = after.map { $0 + [0] }  // the key right after `after`
        while going, i < ranges.count {
            let range = ranges[i]
            try txn.scanInPlace(state, from: resume ?? [UInt8(range.from)]) { key, value in
                guard let first = key.first, UInt16(first) < range.to else { return false }
                going = try body(Array(key), Array(value))
                return going
            }
            resume = nil
            i += 1
        }
    }

    /// The entries of §5 that `entries` (stored entries of `state`, in key
    /// order) give, as `scanState` passes them, but for the no-effect
    /// records, which are appended to `noEffects`, keyed by event id, for
    /// the caller to pass after every other entry (`sortedNoEffects`).
    func stateEntries(
        _ entries: [(key: [UInt8], value: [UInt8])], in txn: Transaction, noEffects: inout [(key: [UInt8], value: [UInt8])],
        _ body: ([UInt8], [UInt8]) throws -> Void
    ) throws {
        try stateEntries(in: txn, noEffects: &noEffects, body) { entry in
            for (key, value) in entries { try entry(key, value) }
        }
    }

    /// The entries `walk` passes to its argument, stored entries of `state`
    /// in key order, as §5 gives them (to `body`; the no-effect records to
    /// `noEffects`): messages expanded and edges given their ids, reading
    /// the log in `txn`.
    private func stateEntries(
        in txn: Transaction, noEffects: inout [(key: [UInt8], value: [UInt8])], _ body: ([UInt8], [UInt8]) throws -> Void,
        walk: ((_ entry: ([UInt8], [UInt8]) throws -> Void) throws -> Void)
    ) throws {
        // `walk` and `body` are both the caller's: a closure passed to one
        // may call the other only once it is known not to escape.
        try withoutActuallyEscaping(body) { body in
            typealias Pending = (key: [UInt8], hlc: HLC, entry: MessageEntry, sender: PublicKey, payloads: (sent: [UInt8], edit: [UInt8]?)?)
            var pending: [Pending] = []
            var senders = Senders(state: state)
            func flush() throws {
                let records = parallelMap(pending, chunk: 64) { m in
                    Result { try m.entry.record(hlc: m.hlc, sender: m.sender, payloads: m.payloads).encoded() }
                }
                for (m, record) in zip(pending, records) { try body(Table.stateKey(m.key), try record.get()) }
                pending.removeAll(keepingCapacity: true)
            }
            try walk { key, value in
                if key.first == Table.message.rawValue {
                    guard key.count == 73 else { throw ProjectionError.corrupt("message key of \(key.count) bytes") }
                    let entry = try MessageEntry.decode(value)
                    // A withdrawn entry lists its send, and holds its reason (§9.1).
                    if entry.withdrawn {
                        if let reason = entry.reason { noEffects.append((Table.noEffect.key(key.suffix(32)), Self.encodeNoEffect(reason))) }
                        return
                    }
                    pending.append((
                        key, HLC(rawValue: Codec.readU64(key[33..<41])), entry, try senders.user(of: entry.device, in: txn),
                        try entry.payloads(log: log, in: txn)
                    ))
                    if pending.count == 4096 { try flush() }
                } else if key.first == Table.edge.rawValue {
                    try flush()
                    try body(Table.stateKey(key), try edgeAddIDs(value, in: txn).flatMap(\.bytes))
                } else if key.first == Table.noEffect.rawValue {
                    noEffects.append((Table.noEffect.key(try noEffectEvent(key, in: txn)), value))
                } else {
                    try flush()
                    try body(Table.stateKey(key), value)
                }
            }
            try flush()
        }
    }

    /// Passes the no-effect records `stateEntries` set aside to `body`
    /// in key order; two for one event are damage.
    static func sortedNoEffects(_ records: [(key: [UInt8], value: [UInt8])], _ body: ([UInt8], [UInt8]) throws -> Void) throws {
        let sorted = records.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        for (i, record) in sorted.enumerated() {
            if i > 0, sorted[i - 1].key == record.key {
                throw ProjectionError.corrupt("two no-effect records for event \(Hex.encode(record.key.suffix(32)))")
            }
            try body(record.key, record.value)
        }
    }

    /// The value §5 gives an `edge` entry, the live adds' ids in order,
    /// from the stored one, their arrival positions (§9.1).
    func edgeAddIDs(_ raw: [UInt8], in txn: Transaction) throws -> [EventID] {
        try FoldRun.edgeArrivals(raw).map { try log.storedID(at: $0, in: txn) }.sorted()
    }

    /// The stored key of the no-effect record of the event at `arrival`
    /// (Specs/projections.md §9.1).
    static func noEffectKey(_ arrival: UInt64) -> [UInt8] { Table.noEffect.key(Codec.u64(arrival)) }

    /// The event whose record a stored no-effect key names: the one at
    /// the key's arrival position.
    func noEffectEvent(_ key: [UInt8], in txn: Transaction) throws -> EventID {
        guard key.count == 9, key.first == Table.noEffect.rawValue else {
            throw ProjectionError.corrupt("no-effect key of \(key.count) bytes")
        }
        return try log.storedID(at: Codec.readU64(key[1...]), in: txn)
    }

    static func factKey(_ cls: ObjectClass, _ object: Bytes32, _ order: MergeOrder) -> [UInt8] {
        keyBytes(cls.rawValue, object, order)
    }

    /// Every key a coin event names: a change to any of their device
    /// bindings can change the event's decision.
    static func coinParties(_ event: Event) -> [Bytes32] {
        var parties: Set<Bytes32> = [event.author, event.object]
        if let p = event.payload {
            if let d = p[text: "device"]?.id32 { parties.insert(d) }
            if let u = p[text: "user"]?.id32 { parties.insert(u) }
        }
        return parties.sorted()
    }
}

/// Why a store's projections cannot be read as they stand (`Projections.staleness()`).
public enum Staleness: Sendable, Equatable, CustomStringConvertible {
    /// Never built, or a rebuild was interrupted.
    case neverBuilt
    /// Built by another projection format (an older or newer node).
    case format(UInt64)
    /// Built for another network configuration (issuers, as in network.json).
    case configuration
    /// Built by this format with another layout of classes and tables
    /// (a build whose layout changed without a format bump).
    case layout

    /// Why, as the end of a sentence that starts "the projections".
    public var description: String {
        switch self {
        case .neverBuilt: "were never built, or their rebuild was interrupted"
        case .format(let old):
            "were built by projection format \(old), and this version reads format \(Projections.formatVersion)"
        case .configuration: "were built for another network configuration (network.json changed since)"
        case .layout: "were built with another layout of projection format \(Projections.formatVersion) (a build whose classes or tables differ)"
        }
    }
}
