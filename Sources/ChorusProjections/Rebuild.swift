import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation

// The whole-log rebuild (Specs/projections.md §9.2): file every event,
// then fold every object class by class in fold order.
extension Projections {
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
    /// are read from the log again. The payloads and blobs of what it
    /// finds deleted are purged by `carryOut` (the store's,
    /// `Store.rebuild`) in the transaction before the built marker.
    package func rebuild(
        sliceSize: Int = 20_000, filingBudget: Int = Projections.filingBudget, sendsBudget: Int = Projections.sendsBudget,
        payloadsBudget: Int = Projections.payloadsBudget, part: Int? = nil,
        progress: ((_ done: Int, _ total: Int) -> Void)? = nil, isCancelled: (() -> Bool)? = nil,
        carryingOut carryOut: (Purges, Transaction) throws -> Void
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
        // Chats' activity, once their memberships and messages are final (§9.1).
        try writeEveryChatActivity()
        try log.env.write { txn in
            try carryOut(try purges(ofDeletedPictures: deleted.pictures, decided: deleted.messagePurges, in: txn), txn)
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
}
