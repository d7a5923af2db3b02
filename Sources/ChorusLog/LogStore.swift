import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// A store whose log cannot be read as this build reads it.
public enum LogError: Error, Sendable, CustomStringConvertible {
    /// The store was written by a newer build; upgrade Chorus to open it: `newer_store_format`.
    case newerFormat(found: UInt64, supported: UInt64)
    /// The store was written by an older build; `chorus upgrade` (or `Node.upgrade`) converts it: `older_store_format`.
    case olderFormat(found: UInt64, supported: UInt64, path: String)
    /// The path holds something other than a Chorus store: `not_a_store`.
    case notAStore(path: String)
    /// The log's bytes break its own invariants (damage on disk): `log_corrupt`.
    case corrupt(String)

    public var description: String {
        switch self {
        case .newerFormat(let found, let supported):
            "this store has format version \(found), newer than the \(supported) this build understands; upgrade Chorus to open it"
        case .olderFormat(let found, let supported, let path):
            "the store \(path) has format version \(found), older than the \(supported) this build uses; upgrade it (it keeps every event), then open it again"
        case .notAStore(let path): "\(path) is not a Chorus store (no format version recorded)"
        case .corrupt(let what): "store damaged: \(what)"
        }
    }
}

/// The state at the end of one feed.
public struct FeedHead: Hashable, Sendable {
    public let seq: UInt64
    public let id: EventID
    public let hlc: HLC

    public init(seq: UInt64, id: EventID, hlc: HLC) {
        self.seq = seq
        self.id = id
        self.hlc = hlc
    }
}

/// What became of one event handed to the log.
package enum AppendOutcome: Hashable, Sendable {
    case accepted(arrival: UInt64)
    case duplicate
    /// Already stored without its payload (purged, or received from a peer
    /// that had purged it); the payload was put back. The projections decide
    /// whether it stays: a deletion purges it again in the same transaction.
    case refilled(arrival: UInt64)
    case refused(EventError)
}

/// Evidence that a feed forked: the event the log holds and the different
/// event that claimed the same position.
public struct ForkEvidence: Sendable {
    public let author: PublicKey
    public let seq: UInt64
    public let kept: EventID
    package let refused: Event
}

/// The event log inside one LMDB environment: envelopes by local arrival
/// position (appended, so the bulk bytes lie in key order), small index
/// entries from ids and feed positions to arrivals, feed heads, fork
/// evidence and metadata (layout in Specs/storage.md). It validates every
/// event against its feed before storing it; a refused event changes nothing.
public struct LogStore: Sendable {
    public static let formatVersion: UInt64 = 5

    public let env: Environment
    let envelopes: Database
    let ids: Database
    let recentIDs: Database
    let positions: Database
    let heads: Database
    let forks: Database
    let meta: Database
    let recentIDsMinimum: Int

    static let formatKey = Array("format".utf8)
    /// The id index: the first 8 bytes of an event id → u64be(arrival),
    /// kept sorted under their prefix (Specs/storage.md §3).
    public static let idsName = "id_prefixes"
    /// The id index's recent level: the same entries for the events
    /// appended and not yet moved into `id_prefixes` (Specs/storage.md §3, §5.3).
    public static let recentIDsName = "id_recent"
    /// The recent level's target: at least `recentIDsMinimum` entries, or
    /// 1/`recentIDsRatio` of the main level's; a commit moves the excess
    /// into the main level (§5.3 says why these).
    static let defaultRecentIDsMinimum = 65_536
    static let recentIDsRatio = 8
    /// Feed positions: author → u64be(seq) ‖ u64be(arrival), 16-byte
    /// values kept sorted under their author (Specs/storage.md §3).
    public static let positionsName = "feed_positions"
    static let maxHLCKey = Array("max_hlc".utf8)
    /// The last id index entry moved from `id_recent` to `id_prefixes`:
    /// u64be(prefix) ‖ u64be(arrival) (Specs/storage.md §5.3).
    static let idsMovedKey = Array("ids_moved".utf8)

    public static let databaseNames = ["envelopes", idsName, recentIDsName, "feed_positions", "heads", "forks", "meta"]

    /// Opens the log in `env`, creating its databases on first use and
    /// refusing a store written by another format (an older one is upgraded
    /// by `LogStore.upgrade`).
    public init(env: Environment) throws {
        try self.init(env: env, recentIDsMinimum: Self.defaultRecentIDsMinimum)
    }

    /// With another least target for the recent level, for tests that
    /// move entries between the id index's levels after a few events.
    package init(env: Environment, recentIDsMinimum: Int) throws {
        self.env = env
        self.recentIDsMinimum = recentIDsMinimum
        // The format is checked before anything else is created, so a store
        // of another format is refused without being written to.
        let meta = try env.openDatabase("meta")
        self.meta = meta
        let stored = try Self.storedFormat(env: env, meta: meta)
        if let stored {
            if stored > Self.formatVersion { throw LogError.newerFormat(found: stored, supported: Self.formatVersion) }
            if stored < Self.formatVersion { throw LogError.olderFormat(found: stored, supported: Self.formatVersion, path: env.path) }
        } else if env.readOnly {
            throw LogError.notAStore(path: env.path)
        } else {
            try env.write { txn in try txn.put(meta, Self.formatKey, Self.encodeU64(Self.formatVersion)) }
        }
        envelopes = try env.openDatabase("envelopes")
        ids = try env.openDatabase(Self.idsName, fixedSizeDuplicates: true)
        recentIDs = try env.openDatabase(Self.recentIDsName, fixedSizeDuplicates: true)
        positions = try env.openDatabase(Self.positionsName, fixedSizeDuplicates: true)
        heads = try env.openDatabase("heads")
        forks = try env.openDatabase("forks")
    }

    static func storedFormat(env: Environment, meta: Database) throws -> UInt64? {
        guard let raw = try env.read({ txn in try txn.get(meta, Self.formatKey) }) else { return nil }
        let version = try Self.decodeU64(raw, what: "format version")
        if version == 0 { throw LogError.corrupt("format version 0 recorded") }
        return version
    }

    /// The format version recorded in `env` (nil for an empty environment).
    public static func format(of env: Environment) throws -> UInt64? {
        try storedFormat(env: env, meta: try env.openDatabase("meta", create: !env.readOnly))
    }

    // MARK: Writing

    /// State carried through one write transaction, read once at its start
    /// and written back by `finish`, so each append does less work.
    public struct AppendContext: Sendable {
        var nextArrival: UInt64
        var maxHLC: UInt64
        let storedMaxHLC: UInt64
        let nowMillis: UInt64
        let driftMillis: UInt64
        /// Heads of the feeds appended to in this transaction, written once
        /// each by `finish` instead of once per event (a sync delivers a
        /// feed's events together).
        var heads: [PublicKey: FeedHead] = [:]
        /// The id-index entries of the events appended so far, written by
        /// `finish` in key order: an id is random, and inserting a commit's
        /// ids in order walks the index's pages once, in order, instead of
        /// descending to a cold page for each (Specs/storage.md §5.3).
        var newIDs: [(prefix: UInt64, arrival: UInt64)] = []
    }

    /// Starts appending inside the caller's write transaction. `nowMillis`
    /// and `driftMillis` bound future timestamps.
    public func appendContext(in txn: Transaction, nowMillis: UInt64, driftMillis: UInt64) throws -> AppendContext {
        let last = try txn.last(envelopes).map { try Self.decodeU64($0.key, what: "arrival position") } ?? 0
        let maxHLC = try txn.get(meta, Self.maxHLCKey).map { try Self.decodeU64($0, what: "max hlc") } ?? 0
        return AppendContext(
            nextArrival: last + 1, maxHLC: maxHLC, storedMaxHLC: maxHLC, nowMillis: nowMillis, driftMillis: driftMillis)
    }

    /// Writes what `append` kept in `context`: the feeds' new heads and the
    /// largest HLC. Called once, after the transaction's last append.
    public func finish(_ context: inout AppendContext, in txn: Transaction) throws {
        try writeIDIndex(&context, in: txn)
        try moveRecentIDsIfDue(in: txn)
        for (author, head) in context.heads.sorted(by: { $0.key < $1.key }) {
            try txn.put(heads, author.bytes, Self.encodeU64(head.seq) + head.id.bytes + Self.encodeU64(head.hlc.rawValue))
        }
        if context.maxHLC > context.storedMaxHLC { try txn.put(meta, Self.maxHLCKey, Self.encodeU64(context.maxHLC)) }
    }

    /// Writes the id-index entries of the events appended so far (`finish`
    /// does it for the rest): until then `readArrival` does not find them.
    public func writeIDIndex(_ context: inout AppendContext, in txn: Transaction) throws {
        // Prefixes compare as big-endian numbers in the order LMDB keeps
        // their bytes; arrivals ascend under one prefix (`MDB_APPENDDUP`).
        context.newIDs.sort { ($0.prefix, $0.arrival) < ($1.prefix, $1.arrival) }
        for entry in context.newIDs {
            try txn.putDuplicate(recentIDs, Self.encodeU64(entry.prefix), Self.encodeU64(entry.arrival), last: true)
        }
        context.newIDs.removeAll()
    }

    /// Moves entries from the id index's recent level into the main one
    /// once the recent level holds more than its target: `recentIDsMinimum`
    /// entries, or 1/`recentIDsRatio` of the main level's when that is more
    /// (Specs/storage.md §5.3). It moves the excess, in key order, from
    /// after the entry the last move ended with (`meta["ids_moved"]`),
    /// going round at the end, so a commit's random ids rewrite the pages
    /// of the small recent level and of one range of the main level, and
    /// no commit rewrites the whole main level.
    func moveRecentIDsIfDue(in txn: Transaction) throws {
        let recent = try txn.count(recentIDs)
        let target = max(recentIDsMinimum, try txn.count(ids) / Self.recentIDsRatio)
        guard recent > target else { return }
        let wanted = recent - target
        let resume = try txn.get(meta, Self.idsMovedKey).map { raw -> (key: [UInt8], value: [UInt8]?) in
            guard raw.count == 16 else { throw LogError.corrupt("ids_moved of \(raw.count) bytes") }
            return (Array(raw[0..<8]), Array(raw[8..<16]))
        }
        let moving = try txn.entriesAfter(recentIDs, cursor: resume, count: wanted)
        for (key, value) in moving {
            guard key.count == 8, value.count == 8 else {
                throw LogError.corrupt("a recent id index entry of \(key.count) and \(value.count) bytes")
            }
            try txn.putDuplicate(ids, key, value, last: false)
            _ = try txn.deleteDuplicate(recentIDs, key, value)
        }
        if let last = moving.last { try txn.put(meta, Self.idsMovedKey, last.key + last.value) }
    }

    /// Validates `event` against its feed and stores it, inside the caller's
    /// write transaction. The signature must already have been verified.
    package func append(_ event: Event, in txn: Transaction, context: inout AppendContext) throws -> AppendOutcome {
        let author = event.header.author
        let seq = event.header.seq
        let head = try head(of: author, in: txn, context: context)
        // Feeds are stored contiguously (Specs/events.md §7.2): every stored
        // event of this author has a sequence number at most the head's, and
        // the id covers the author and the sequence number. So checks 1 and
        // 2 cannot hold for an event beyond the head, and the common case,
        // the next event of a feed, skips both lookups. At or below the
        // head the feed holds an event at this position, and it is this
        // event (check 1) exactly when its id is this id; the id index is
        // not needed, so it can be written once per transaction (`finish`).
        if seq <= head?.seq ?? 0, let arrival = try arrival(of: author, seq: seq, in: txn) {
            if try storedID(at: arrival, in: txn) == event.id {
                guard event.payloadBytes != nil, event.kind.payloadIsPurgeable else { return .duplicate }
                let existing = try readEnvelope(at: arrival, in: txn)
                guard existing.payloadBytes == nil else { return .duplicate }
                try txn.put(envelopes, Self.encodeU64(arrival), event.refilled(keeping: existing).encoded())
                return .refilled(arrival: arrival)
            }
            // A different event at a position the feed already holds: keep the evidence.
            try txn.put(forks, Self.feedKey(author, seq) + event.id.bytes, event.encoded())
            let kept = try Self.decodeTrusted(try rawEnvelope(at: arrival, in: txn), arrival: arrival)
            return .refused(.fork(seq: seq, existing: kept.id))
        }
        let expected = (head?.seq ?? 0) + 1
        if seq != expected {
            // seq < expected is impossible here: that position would exist in `positions`.
            return .refused(.sequenceGap(expected: expected, got: seq))
        }
        if event.header.prev != head?.id { return .refused(.wrongPrevious(seq: seq)) }
        if let head, event.hlc <= head.hlc { return .refused(.clockNotIncreasing(seq: seq)) }
        let physical = event.hlc.physicalMillis
        if physical > context.nowMillis &+ context.driftMillis {
            return .refused(.timestampInFuture(aheadMillis: physical - context.nowMillis, driftMillis: context.driftMillis))
        }

        let arrival = context.nextArrival
        context.nextArrival += 1
        context.maxHLC = max(context.maxHLC, event.hlc.rawValue)
        let arrivalKey = Self.encodeU64(arrival)
        try txn.put(envelopes, arrivalKey, event.encoded(), append: true)
        context.newIDs.append((Self.idPrefixNumber(event.id), arrival))
        // The next position of its feed: the greatest of the author's values.
        try txn.putDuplicate(positions, author.bytes, Self.encodeU64(seq) + arrivalKey, last: true)
        context.heads[author] = FeedHead(seq: seq, id: event.id, hlc: event.hlc)
        return .accepted(arrival: arrival)
    }

    /// Removes the payload of a stored event, keeping its signed header
    /// (Specs/events.md §6, projections.md §6.3). Returns false when it was already purged or absent.
    @discardableResult
    public func purgePayload(_ id: EventID, in txn: Transaction) throws -> Bool {
        guard let arrival = try readArrival(of: id, in: txn) else { return false }
        return try purgePayload(atArrival: arrival, in: txn)
    }

    /// Removes the payload of the event at `arrival`.
    @discardableResult
    public func purgePayload(atArrival arrival: UInt64, in txn: Transaction) throws -> Bool {
        let event = try readEnvelope(at: arrival, in: txn)
        guard event.payloadBytes != nil else { return false }
        guard event.kind.payloadIsPurgeable else {
            throw LogError.corrupt("asked to purge event \(event.id.hex) of kind \(event.kind.name), which is not purgeable")
        }
        try txn.put(envelopes, Self.encodeU64(arrival), event.purged().encoded())
        return true
    }

    // MARK: Reading (each call is one read transaction; `in:` variants join the caller's)

    /// The head of `author`'s feed inside a write transaction that is
    /// appending: the head `context` holds (not yet written), else the stored one.
    public func head(of author: PublicKey, in txn: Transaction, context: AppendContext) throws -> FeedHead? {
        try context.heads[author] ?? readHead(author, in: txn)
    }

    /// The stored head of `author`'s feed: inside a transaction that is
    /// appending, use `head(of:in:context:)`, which sees its appends.
    public func readHead(_ author: PublicKey, in txn: Transaction) throws -> FeedHead? {
        guard let raw = try txn.get(heads, author.bytes) else { return nil }
        return try Self.decodeHead(raw)
    }

    public func head(of author: PublicKey) throws -> FeedHead? {
        try env.read { txn in try readHead(author, in: txn) }
    }

    /// Every feed's head, ordered by author key.
    public func allHeads() throws -> [(author: PublicKey, head: FeedHead)] {
        try env.read { txn in
            var out: [(PublicKey, FeedHead)] = []
            try txn.scan(heads) { key, value in
                guard let author = Bytes32(key) else { throw LogError.corrupt("feed head key of \(key.count) bytes") }
                out.append((author, try Self.decodeHead(value)))
                return true
            }
            return out
        }
    }

    /// The arrival position of a stored event: of the events the id index
    /// lists under the id's first 8 bytes (nearly always one), the one
    /// whose id it is (Specs/storage.md §3). In a transaction that is
    /// appending, its own events are found once `finish` (or `writeIDIndex`)
    /// has written their entries.
    public func readArrival(of id: EventID, in txn: Transaction) throws -> UInt64? {
        var found: UInt64? = nil
        let prefix = Self.idPrefix(id)
        for level in [recentIDs, ids] {
            try txn.scanDuplicates(level, prefix, from: Self.encodeU64(0)) { value in
                let arrival = try Self.decodeU64(value, what: "arrival under id prefix \(id.short)")
                if try storedID(at: arrival, in: txn) == id {
                    found = arrival
                    return false
                }
                return true
            }
            if found != nil { break }
        }
        return found
    }

    /// The id of the event stored at `arrival`, hashed where LMDB holds it.
    public func storedID(at arrival: UInt64, in txn: Transaction) throws -> EventID {
        try txn.withValue(envelopes, Self.encodeU64(arrival)) { raw in
            guard let raw else { throw LogError.corrupt("no event at arrival \(arrival)") }
            do { return try Event.storedID(ofEnvelope: raw) } catch { throw LogError.corrupt("event at arrival \(arrival): \(error)") }
        }
    }

    /// The key an event id is indexed under: its first 8 bytes.
    static func idPrefix(_ id: EventID) -> [UInt8] { encodeU64(idPrefixNumber(id)) }

    /// The id's first 8 bytes read as a big-endian number, which orders as
    /// the key bytes do (a commit sorts its new entries by it).
    static func idPrefixNumber(_ id: EventID) -> UInt64 { id.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self).bigEndian } }

    /// The envelope bytes stored at `arrival`; a missing one is damage.
    public func rawEnvelope(at arrival: UInt64, in txn: Transaction) throws -> [UInt8] {
        guard let raw = try txn.get(envelopes, Self.encodeU64(arrival)) else { throw LogError.corrupt("no event at arrival \(arrival)") }
        return raw
    }

    /// The event stored at `arrival`; a missing or undecodable one is damage.
    package func readEnvelope(at arrival: UInt64, in txn: Transaction) throws -> Event {
        try Self.decodeEnvelope(try rawEnvelope(at: arrival, in: txn), arrival: arrival)
    }

    /// The event stored at `arrival`, decoded without re-checking its
    /// payload (`decodeTrusted`): for the fold, which reads what the log
    /// accepted.
    package func readTrusted(at arrival: UInt64, in txn: Transaction) throws -> Event {
        try Self.decodeTrusted(try rawEnvelope(at: arrival, in: txn), arrival: arrival)
    }

    /// The payload bytes of the event at `arrival` (nil when purged), read
    /// without decoding the event (`Event.storedPayload`).
    public func readPayload(at arrival: UInt64, in txn: Transaction) throws -> [UInt8]? {
        try txn.withValue(envelopes, Self.encodeU64(arrival)) { raw in
            guard let raw else { throw LogError.corrupt("no event at arrival \(arrival)") }
            do { return try Event.storedPayload(ofEnvelope: raw) } catch { throw LogError.corrupt("event at arrival \(arrival): \(error)") }
        }
    }

    /// The header and payload bytes (nil when purged) of the event at
    /// `arrival`, without computing its id (`Event.storedHeaderAndPayload`):
    /// for a fold that knows it.
    package func readHeaderAndPayload(at arrival: UInt64, in txn: Transaction) throws -> (header: EventHeader, payload: [UInt8]?) {
        try txn.withValue(envelopes, Self.encodeU64(arrival)) { raw in
            guard let raw else { throw LogError.corrupt("no event at arrival \(arrival)") }
            do { return try Event.storedHeaderAndPayload(ofEnvelope: raw) } catch {
                throw LogError.corrupt("event at arrival \(arrival) does not decode: \(error)")
            }
        }
    }

    public func readEvent(_ id: EventID, in txn: Transaction) throws -> StoredEvent? {
        guard let arrival = try readArrival(of: id, in: txn) else { return nil }
        return StoredEvent(event: try readEnvelope(at: arrival, in: txn), arrival: arrival)
    }

    public func event(_ id: EventID) throws -> StoredEvent? {
        try env.read { txn in try readEvent(id, in: txn) }
    }

    /// Events of one feed from `fromSeq`, in sequence order.
    public func feed(_ author: PublicKey, fromSeq: UInt64 = 1, limit: Int = .max) throws -> [StoredEvent] {
        try env.read { txn in
            var out: [StoredEvent] = []
            guard limit > 0 else { return out }
            try scanFeed(author, fromSeq: fromSeq, in: txn) { _, arrival in
                out.append(StoredEvent(event: try readEnvelope(at: arrival, in: txn), arrival: arrival))
                return out.count < limit
            }
            return out
        }
    }

    /// The stored envelopes of one feed from `fromSeq`, in sequence order, as
    /// bytes (for serving them to a peer: no decoding and re-encoding).
    public func feedEnvelopes(_ author: PublicKey, fromSeq: UInt64, limit: Int) throws -> [(seq: UInt64, envelope: [UInt8])] {
        try env.read { txn in
            var out: [(UInt64, [UInt8])] = []
            guard limit > 0 else { return out }
            try scanFeed(author, fromSeq: fromSeq, in: txn) { seq, arrival in
                out.append((seq, try rawEnvelope(at: arrival, in: txn)))
                return out.count < limit
            }
            return out
        }
    }

    /// Every event of `author`'s feed in sequence order, inside the caller's
    /// transaction, decoded without re-checking payloads (`Event.decodeStored`).
    public func forEachEvent(
        of author: PublicKey, in txn: Transaction, except skipped: Set<UInt64> = [], _ body: (StoredEvent) throws -> Void
    ) throws {
        try scanFeed(author, fromSeq: 1, in: txn) { _, arrival in
            if skipped.contains(arrival) { return true }
            try body(StoredEvent(event: try Self.decodeTrusted(try rawEnvelope(at: arrival, in: txn), arrival: arrival), arrival: arrival))
            return true
        }
    }

    /// Events that arrived after position `since`, in arrival order: one
    /// sequential read of the envelopes. `trusted` skips re-checking each
    /// payload's hash and schema (`Event.decodeStored`), for whole-log folds.
    public func arrivals(since: UInt64, limit: Int = .max, trusted: Bool = false) throws -> [StoredEvent] {
        try env.read { txn in
            var out: [StoredEvent] = []
            guard limit > 0 else { return out }
            try txn.scan(envelopes, from: Self.encodeU64(since &+ 1)) { key, value in
                let arrival = try Self.decodeU64(key, what: "arrival position")
                let event = trusted ? try Self.decodeTrusted(value, arrival: arrival) : try Self.decodeEnvelope(value, arrival: arrival)
                out.append(StoredEvent(event: event, arrival: arrival))
                return out.count < limit
            }
            return out
        }
    }

    /// The authors of the events that arrived after `since`, reading at
    /// most `limit` events, with the position of the last one read (`since`
    /// when none): the feeds a peer that synced up to `since` may lack
    /// (Specs/sync.md §4.2). Only the headers are decoded.
    public func authorsArrived(since: UInt64, limit: Int) throws -> (authors: Set<PublicKey>, last: UInt64, read: Int) {
        try env.read { txn in
            var authors: Set<PublicKey> = []
            var last = since
            var read = 0
            guard limit > 0 else { return (authors, last, read) }
            try txn.scanInPlace(envelopes, from: Self.encodeU64(since &+ 1)) { key, value in
                last = try Self.decodeU64(Array(key), what: "arrival position")
                do {
                    authors.insert(try Event.storedHeader(ofEnvelope: value).author)
                } catch {
                    throw LogError.corrupt("event at arrival \(last) does not decode: \(error)")
                }
                read += 1
                return read < limit
            }
            return (authors, last, read)
        }
    }

    /// The position of the newest arrival (0 for an empty log).
    public func lastArrival() throws -> UInt64 {
        try env.read { txn in
            guard let last = try txn.last(envelopes) else { return 0 }
            return try Self.decodeU64(last.key, what: "arrival position")
        }
    }

    /// Lets the next commit reuse the pages the last one freed, with a
    /// commit that rewrites `meta["format"]` as it is (Specs/storage.md
    /// §5.1 step 8; `Environment.releaseFreedPages`).
    public func releaseFreedPages() throws { try env.releaseFreedPages(rewriting: Self.formatKey, in: meta) }

    public func eventCount() throws -> Int { try env.read { txn in try txn.count(envelopes) } }

    /// The stored envelopes after `since` in arrival order, in slices of
    /// `sliceSize`, as raw bytes (for audits that must see damage a decoding
    /// reader would reject). `body` returns whether to go on.
    public func rawEnvelopes(
        since: UInt64 = 0, sliceSize: Int = 10_000, _ body: ([(arrival: UInt64, bytes: [UInt8])]) throws -> Bool
    ) throws {
        var from = since
        while true {
            let slice = try rawEnvelopes(since: from, limit: sliceSize)
            guard let last = slice.last else { return }
            guard try body(slice), slice.count == sliceSize else { return }
            from = last.arrival
        }
    }

    /// The first `limit` stored envelopes after `since`, in arrival order,
    /// as raw bytes: one slice of `rawEnvelopes`, for readers that take
    /// slices on their own schedule (a rebuild reading ahead).
    public func rawEnvelopes(since: UInt64, limit: Int) throws -> [(arrival: UInt64, bytes: [UInt8])] {
        var slice: [(arrival: UInt64, bytes: [UInt8])] = []
        try env.read { txn in
            try txn.scan(envelopes, from: Self.encodeU64(since &+ 1)) { key, value in
                slice.append((try Self.decodeU64(key, what: "arrival position"), value))
                return slice.count < limit
            }
        }
        return slice
    }

    /// Each event at arrivals in `range`, in arrival order, decoded where
    /// the store holds it without re-checking its payload (`decodeTrusted`):
    /// a rebuild's filing, one part of the log per core, each in a read
    /// transaction of its own.
    ///
    /// An event's id is the BLAKE2b hash of its header, most of the cost of
    /// reading it. Where the next stored event is the next event of the
    /// same feed (a feed arrives in ranges, in order), its `prev` is that
    /// id: `append` stores an event only if its `prev` is the stored head's
    /// id (Specs/events.md §7.2), and no stored header ever changes. So
    /// each event is handed on once the next one is read, with the id the
    /// next one names, and hashed only where it names none.
    package func forEachTrusted(arrivals range: ClosedRange<UInt64>, _ body: (_ arrival: UInt64, _ event: Event) throws -> Void) throws {
        try env.read { txn in
            var pending: (arrival: UInt64, event: Event.Unidentified)? = nil
            try txn.scanInPlace(envelopes, from: Self.encodeU64(range.lowerBound)) { key, value in
                guard key.count == 8 else { throw LogError.corrupt("arrival position of \(key.count) bytes") }
                let arrival = UInt64(bigEndian: key.loadUnaligned(as: UInt64.self))
                guard arrival <= range.upperBound else { return false }
                let event: Event.Unidentified
                do { event = try Event.decodeStoredUnidentified(value) } catch {
                    throw LogError.corrupt("event at arrival \(arrival) does not decode: \(error)")
                }
                if let (before, previous) = pending {
                    let successor = event.header.author == previous.header.author && event.header.seq == previous.header.seq + 1
                    let named = successor ? event.header.prev : nil
                    try body(before, named.map(previous.identified(as:)) ?? previous.identified())
                }
                pending = (arrival, event)
                return arrival < range.upperBound
            }
            if let (last, event) = pending { try body(last, event.identified()) }
        }
    }

    /// Decodes a stored envelope without re-checking its payload
    /// (`Event.decodeStored`); damage is reported as `corrupt`.
    package static func decodeTrusted(_ raw: [UInt8], arrival: UInt64) throws -> Event {
        do { return try Event.decodeStored(raw) } catch { throw LogError.corrupt("event at arrival \(arrival) does not decode: \(error)") }
    }

    /// Decodes a stored envelope, re-applying the checks of
    /// Specs/events.md §7.1 (decoding); damage is reported as `corrupt`.
    package static func decodeEnvelope(_ raw: [UInt8], arrival: UInt64) throws -> Event {
        do { return try Event.decode(raw) } catch {
            throw LogError.corrupt("event at arrival \(arrival) does not decode: \(error)")
        }
    }

    /// Database sizes in bytes (pages in use), by name.
    public func databaseSizes() throws -> [(name: String, bytes: Int)] {
        [("envelopes", envelopes), (Self.idsName, ids), (Self.recentIDsName, recentIDs), (Self.positionsName, positions), ("heads", heads), ("forks", forks), ("meta", meta)].map {
            ($0.0, (try? env.pageCount(of: $0.1)) ?? 0)
        }
    }

    /// Raw access for tests that damage a store on purpose: writes (or,
    /// with nil, deletes) one entry of a log database. For `feed_positions`
    /// the key is author ‖ u64be(seq) and the value u64be(arrival), as if
    /// each position were an entry of its own; for the id index the key is
    /// an event id, and the value replaces every arrival listed under its
    /// prefix, in either level.
    public func unsafeWrite(database name: String, key: [UInt8], value: [UInt8]?) throws {
        let db: Database
        switch name {
        case "envelopes": db = envelopes
        case Self.idsName: db = ids
        case Self.positionsName: db = positions
        case "heads": db = heads
        case "forks": db = forks
        default: db = meta
        }
        try env.write { txn in
            if db == ids {
                guard let id = Bytes32(key) else { throw LogError.corrupt("an id index key here is an event id (32 bytes)") }
                _ = try txn.delete(ids, Self.idPrefix(id))
                _ = try txn.delete(recentIDs, Self.idPrefix(id))
                if let value { try txn.putDuplicate(ids, Self.idPrefix(id), value, last: false) }
                return
            }
            guard db == positions else {
                if let value { try txn.put(db, key, value) } else { try txn.delete(db, key) }
                return
            }
            // Feed positions: `key` is author ‖ u64be(seq), `value` the arrival.
            guard key.count == 40 else { throw LogError.corrupt("a feed position key has 40 bytes") }
            let author = Array(key[0..<32])
            if let old = try txn.firstDuplicate(positions, author, from: Array(key[32..<40])), old.starts(with: key[32..<40]) {
                try txn.deleteDuplicate(positions, author, old)
            }
            if let value { try txn.putDuplicate(positions, author, Array(key[32..<40]) + value, last: false) }
        }
    }

    /// The largest HLC of any stored event; a node's clock starts past it.
    public func maxHLC() throws -> HLC {
        try env.read { txn in
            HLC(rawValue: try txn.get(meta, Self.maxHLCKey).map { try Self.decodeU64($0, what: "max hlc") } ?? 0)
        }
    }

    public func forkEvidence() throws -> [ForkEvidence] {
        try env.read { txn in
            var out: [ForkEvidence] = []
            try txn.scan(forks) { key, value in
                guard key.count == 72, let author = Bytes32(key[0..<32]) else {
                    throw LogError.corrupt("fork evidence key of \(key.count) bytes")
                }
                let seq = try Self.decodeU64(Array(key[32..<40]), what: "fork sequence")
                guard let keptArrival = try arrival(of: author, seq: seq, in: txn) else {
                    throw LogError.corrupt("fork evidence for \(author.short)#\(seq) without a kept event")
                }
                let kept = try readEnvelope(at: keptArrival, in: txn).id
                let refused: Event
                do { refused = try Event.decode(value) } catch { throw LogError.corrupt("fork evidence: \(error)") }
                out.append(ForkEvidence(author: author, seq: seq, kept: kept, refused: refused))
                return true
            }
            return out
        }
    }

    /// Which of `events` (in any order) the log already holds, by their
    /// ids at their feed positions: one head read per author, and a lookup
    /// only for positions at or below the head. Ingest skips verifying
    /// these (Specs/events.md §7.1): the id is the hash of the header, so a
    /// held id means a header already verified; the new envelope's
    /// signature is never stored, as the log keeps the first one. An event
    /// that would refill a purged payload (`append` then stores its
    /// envelope) counts as not held, so it is verified.
    package func held(_ events: some Collection<(author: PublicKey, seq: UInt64, id: EventID, mayRefill: Bool)>) throws -> [Bool] {
        try env.read { txn in
            var out: [Bool] = []
            out.reserveCapacity(events.count)
            var lastAuthor: PublicKey? = nil
            var headSeq: UInt64 = 0
            for e in events {
                if e.author != lastAuthor {
                    lastAuthor = e.author
                    headSeq = try readHead(e.author, in: txn)?.seq ?? 0
                }
                guard e.seq <= headSeq, let arrival = try arrival(of: e.author, seq: e.seq, in: txn) else {
                    out.append(false)
                    continue
                }
                let same = try storedID(at: arrival, in: txn) == e.id
                let refills = try same && e.mayRefill && readPayload(at: arrival, in: txn) == nil
                out.append(same && !refills)
            }
            return out
        }
    }

    // MARK: Feed positions

    /// The arrival position of `author`'s event at `seq`, or nil when the
    /// feed holds none there.
    func arrival(of author: PublicKey, seq: UInt64, in txn: Transaction) throws -> UInt64? {
        guard let value = try txn.firstDuplicate(positions, author.bytes, from: Self.encodeU64(seq)) else { return nil }
        let (found, arrival) = try Self.decodePosition(value)
        return found == seq ? arrival : nil
    }

    /// Visits `author`'s feed positions from `fromSeq` in sequence order
    /// (seq, arrival) until `body` returns false.
    func scanFeed(_ author: PublicKey, fromSeq: UInt64, in txn: Transaction, _ body: (UInt64, UInt64) throws -> Bool) throws {
        try txn.scanDuplicates(positions, author.bytes, from: Self.encodeU64(fromSeq)) { value in
            let (seq, arrival) = try Self.decodePosition(value)
            return try body(seq, arrival)
        }
    }

    static func decodePosition(_ value: [UInt8]) throws -> (seq: UInt64, arrival: UInt64) {
        guard value.count == 16 else { throw LogError.corrupt("feed position of \(value.count) bytes") }
        return (value[0..<8].reduce(0) { $0 << 8 | UInt64($1) }, value[8..<16].reduce(0) { $0 << 8 | UInt64($1) })
    }

    // MARK: Encodings

    static func feedKey(_ author: PublicKey, _ seq: UInt64) -> [UInt8] { author.bytes + encodeU64(seq) }

    public static func encodeU64(_ n: UInt64) -> [UInt8] { bigEndianBytes(n) }

    public static func decodeU64(_ b: [UInt8], what: String) throws -> UInt64 {
        guard b.count == 8 else { throw LogError.corrupt("\(what) of \(b.count) bytes") }
        return b.reduce(0) { $0 << 8 | UInt64($1) }
    }

    static func decodeHead(_ raw: [UInt8]) throws -> FeedHead {
        guard raw.count == 48, let id = Bytes32(raw[8..<40]) else { throw LogError.corrupt("feed head of \(raw.count) bytes") }
        return FeedHead(
            seq: try decodeU64(Array(raw[0..<8]), what: "head seq"), id: id,
            hlc: HLC(rawValue: try decodeU64(Array(raw[40..<48]), what: "head hlc")))
    }
}

/// An event as the log holds it, with its local arrival position.
public struct StoredEvent: Sendable, Hashable {
    package let event: Event
    public let arrival: UInt64

    package init(event: Event, arrival: UInt64) {
        self.event = event
        self.arrival = arrival
    }
}

extension LogStore {
    /// Checks every feed against itself and the indexes (`FeedAudit`): each
    /// stored envelope decodes canonically with a valid signature, each feed
    /// is consecutive from #1, chained, with increasing timestamps, and the
    /// feed positions, the id index and the heads name exactly the stored
    /// events. Returns one line per problem found. `verifySignatures: false`
    /// skips the signature check, and the payload hash and schema checks.
    /// One read transaction: a consistent snapshot of a store being written.
    public func integrityProblems(verifySignatures: Bool = true) throws -> [String] {
        try env.read { txn in
            var problems: [String] = []
            var audit = FeedAudit()
            try txn.scan(envelopes) { key, raw in
                guard let arrival = try? Self.decodeU64(key, what: "arrival position") else {
                    problems.append("an envelope under a key of \(key.count) bytes")
                    return true
                }
                let e: Event
                do { e = verifySignatures ? try Self.decodeEnvelope(raw, arrival: arrival) : try Self.decodeTrusted(raw, arrival: arrival) } catch {
                    problems.append("arrival \(arrival): \(error)")
                    audit.unreadable(arrival: arrival)
                    return true
                }
                if verifySignatures && !e.verifySignature() { problems.append("feed \(e.author.hex) #\(e.seq): bad signature") }
                audit.observe(e, arrival: arrival)
                return true
            }
            return problems + (try audit.finish(self, in: txn))
        }
    }
}

extension LogError {
    /// A stable, machine-readable name of the error, in snake case.
    public var code: String {
        switch self {
        case .newerFormat: "newer_store_format"
        case .olderFormat: "older_store_format"
        case .notAStore: "not_a_store"
        case .corrupt: "log_corrupt"
        }
    }
}
