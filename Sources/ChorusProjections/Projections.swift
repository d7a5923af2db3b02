import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation
import Synchronization

/// The projected state of a node: profiles, pictures, relationships, chats,
/// coins and slots, kept in the same LMDB environment as the log and updated
/// in the same write transaction as the append that causes it (Specs/storage.md,
/// "Projection and blob databases"). The state is a pure function of the set of events held:
/// every event is filed as a fact under the objects it touches, and each
/// touched object is re-folded from all of its facts in merge order, so
/// delivery order never matters (Specs/projections.md).
package struct Projections: Sendable {
    /// The event log, whose LMDB environment also holds the projection
    /// databases.
    package let log: LogStore
    /// The blob store, read to know which referenced blobs this node lacks
    /// (`blobWanted`); the store, not the projections, removes purged blobs.
    package let blobs: BlobStore
    /// The network configuration folds read (issuers, slot prices); its
    /// fingerprint is part of the digest.
    package let config: NetworkConfig
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
    /// The most coins the issuers' credits may ever add up to
    /// (Specs/projections.md §6.9): 2^63 − 1, so no rights, balance or sum of
    /// them can pass what a signed 64-bit count holds. Lower only in tests,
    /// which cannot sign the nine million largest credits that reach it.
    package let supplyLimit: Int64
    package static let defaultSupplyLimit = Int64.max
    /// Facts the folds of commits have read back from the facts tables, and
    /// messages' sends from the log (a rebuild's bulk fold, which reads each
    /// once, not counted): what the
    /// tests count that hold an event's cost to what it changes, not to how
    /// many events name its object.
    package let factsReadByFolds = FoldCounter()
    /// Chat-list entries whose unread count a commit's fold found again by
    /// reading the chat's messages (§9.1), rather than kept or grown: what
    /// the tests count that hold a membership change to the members it changed.
    package let unreadRecountsByFolds = FoldCounter()
    package static let defaultRecentFactsMinimum = 32_768
    static let recentFactsRatio = 8

    /// The LMDB databases the projections keep beside the log
    /// (Specs/projections.md §9.1).
    package static let databaseNames = ["facts", "facts_recent", "index", "state"]

    /// Opens the `facts`, `facts_recent`, `index` and `state` databases in
    /// `log`'s environment (creating them in a writable one); throws when
    /// LMDB cannot. Folds nothing: stale projections (`staleness()`) are
    /// rebuilt by `Store.rebuild`.
    package init(log: LogStore, blobs: BlobStore, config: NetworkConfig) throws {
        try self.init(log: log, blobs: blobs, config: config, recentFactsMinimum: Self.defaultRecentFactsMinimum)
    }

    /// With another least target for the facts' recent level, for tests
    /// that move facts between the levels after a few events.
    package init(
        log: LogStore, blobs: BlobStore, config: NetworkConfig, recentFactsMinimum: Int, supplyLimit: Int64 = Projections.defaultSupplyLimit
    ) throws {
        self.log = log
        self.supplyLimit = supplyLimit
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
    /// fold decided, for the store to carry out (`Store.carryOut`) in the
    /// same transaction: the projections never write the log or the blobs.
    /// `refilled` names the events of `events` that were stored before
    /// (their payload refilled): unlike the others, they may have state
    /// and decisions already.
    package func apply(_ events: [StoredEvent], refilled: Set<EventID> = [], in txn: Transaction) throws -> Purges {
        guard !events.isEmpty else { return Purges() }
        var run: FoldRun? = FoldRun(projections: self, txn: txn)
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
                    for named in FoldRun.seen(kind: event.kind, payload: event.payload) {
                        try sink.put(
                            index, IndexTable.relationshipCancel.key(cls.rawValue, object, named, order), [])
                    }
                }
                run?.addRelationshipFact(cls, object, Fact(stored))
            case .device, .profile, .picture, .chat, .reads, .slots, .deviceKey, .chatKeys, .message:
                // Folded one at a time where the object's stored state
                // decides the event, else with the object's other facts
                // (`FoldRun.foldOneByOne`, §9.1).
                run?.addNewFact(cls, object, Fact(stored))
            }
        }
        return targets
    }

    /// The purges of these deleted pictures (their payloads and unused
    /// blobs), with what a bulk fold already `decided` to purge: the end
    /// of a rebuild, for the store to carry out.
    func purges(ofDeletedPictures pictures: [ObjectID], decided: Purges, in txn: Transaction) throws -> Purges {
        var run = FoldRun(projections: self, txn: txn)
        for picture in pictures { run.purgeContent(of: picture, try run.facts(.picture, picture)) }
        run.purges.add(decided)
        return run.purges
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
    /// marker also names the layout (`layoutFingerprint`, §9.1). 23: each
    /// member's chat activity entry (`chatActivity`, §9.1). 24: which holds
    /// the member's unread count. 25: each chat's row (`chatRow`, §9.1).
    /// 26: a picture's or chat's id bound to a creation's key admits only
    /// that key's creations (`foreign_id`, §6.3, §6.5). 27: the issuers'
    /// credits add up to at most 2^63 − 1 coins (`supply_exhausted`, §6.9).
    package static let formatVersion: UInt64 = 27

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
    package func isCurrent() throws -> Bool { try staleness() == nil }

    /// Why the stored state is not this format's with this configuration,
    /// or nil when it is (`isCurrent()`). A reader of stale state would read
    /// records of another layout as this one's: tools that read a store
    /// without rebuilding it refuse it instead.
    package func staleness() throws -> Staleness? {
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
    package func markStale() throws {
        try log.env.write { txn in _ = try txn.delete(index, Self.builtKey) }
    }

    /// Marks the projections of `env` stale without opening them (after a
    /// store format upgrade): the next read-write open folds the log again.
    package static func markStale(env: Environment) throws {
        let index = try env.openDatabase("index")
        try env.write { txn in _ = try txn.delete(index, builtKey) }
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

/// A count shared by every copy of a `Projections` (`factsReadByFolds`,
/// `unreadRecountsByFolds`).
package final class FoldCounter: Sendable {
    private let count = Atomic<Int>(0)
    package var value: Int { count.load(ordering: .relaxed) }
    func add(_ n: Int) { count.wrappingAdd(n, ordering: .relaxed) }
}
