import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation

// The rebuild's folding passes (Specs/projections.md §9.2, §9.3): held
// messages and the classes folded in parts off the write transaction.
extension Projections {
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
}
