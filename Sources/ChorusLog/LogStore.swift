import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

public enum LogError: Error, Sendable, CustomStringConvertible {
    case newerFormat(found: UInt64, supported: UInt64)
    case notAStore(path: String)
    case corrupt(String)

    public var description: String {
        switch self {
        case .newerFormat(let found, let supported):
            "this store has format version \(found), newer than the \(supported) this build understands; upgrade Chorus to open it"
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
public enum AppendOutcome: Hashable, Sendable {
    case accepted(arrival: UInt64)
    case duplicate
    /// Already stored without its payload (purged, or received from a peer
    /// that had purged it); the payload was put back. The projections decide
    /// whether it stays: a deletion purges it again in the same transaction.
    case refilled
    case refused(EventError)
}

/// Evidence that a feed forked: the event the log holds and the different
/// event that claimed the same position.
public struct ForkEvidence: Sendable {
    public let author: PublicKey
    public let seq: UInt64
    public let kept: EventID
    public let refused: Event
}

/// The event log inside one LMDB environment: events by id, feeds by
/// (author, seq), feed heads, the local arrival log, fork evidence and
/// metadata (layout in Specs/storage.md). It validates every event against
/// its feed before storing it; a refused event changes nothing.
public struct LogStore: Sendable {
    public static let formatVersion: UInt64 = 1

    public let env: Environment
    let events: Database
    let feeds: Database
    let heads: Database
    let arrivals: Database
    let forks: Database
    let meta: Database

    static let formatKey = Array("format".utf8)
    static let maxHLCKey = Array("max_hlc".utf8)

    public static let databaseNames = ["events", "feeds", "heads", "arrivals", "forks", "meta"]

    /// Opens the log in `env`, creating its databases on first use and
    /// refusing a store written by a newer format.
    public init(env: Environment) throws {
        self.env = env
        // The format is checked before anything else is created, so a newer
        // store is refused without being written to.
        let meta = try env.openDatabase("meta")
        self.meta = meta
        let stored = try env.read { txn in try txn.get(meta, Self.formatKey) }
        if let stored {
            let version = try Self.decodeU64(stored, what: "format version")
            if version > Self.formatVersion { throw LogError.newerFormat(found: version, supported: Self.formatVersion) }
            if version == 0 { throw LogError.corrupt("format version 0 recorded") }
        } else if env.readOnly {
            throw LogError.notAStore(path: env.path)
        } else {
            try env.write { txn in try txn.put(meta, Self.formatKey, Self.encodeU64(Self.formatVersion)) }
        }
        events = try env.openDatabase("events")
        feeds = try env.openDatabase("feeds")
        heads = try env.openDatabase("heads")
        arrivals = try env.openDatabase("arrivals")
        forks = try env.openDatabase("forks")
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
    }

    /// Starts appending inside the caller's write transaction. `nowMillis`
    /// and `driftMillis` bound future timestamps.
    public func appendContext(in txn: Transaction, nowMillis: UInt64, driftMillis: UInt64) throws -> AppendContext {
        let last = try txn.last(arrivals).map { try Self.decodeU64($0.key, what: "arrival position") } ?? 0
        let maxHLC = try txn.get(meta, Self.maxHLCKey).map { try Self.decodeU64($0, what: "max hlc") } ?? 0
        return AppendContext(
            nextArrival: last + 1, maxHLC: maxHLC, storedMaxHLC: maxHLC, nowMillis: nowMillis, driftMillis: driftMillis)
    }

    public func finish(_ context: AppendContext, in txn: Transaction) throws {
        if context.maxHLC > context.storedMaxHLC { try txn.put(meta, Self.maxHLCKey, Self.encodeU64(context.maxHLC)) }
    }

    /// Validates `event` against its feed and stores it, inside the caller's
    /// write transaction. The signature must already have been verified.
    public func append(_ event: Event, in txn: Transaction, context: inout AppendContext) throws -> AppendOutcome {
        let idKey = event.id.bytes
        if let stored = try txn.get(events, idKey) {
            guard event.payloadBytes != nil, event.kind.payloadIsPurgeable else { return .duplicate }
            let existing = try Self.decodeStored(stored, id: event.id)
            guard existing.event.payloadBytes == nil else { return .duplicate }
            try txn.put(events, idKey, Self.encodeU64(existing.arrival) + event.encoded())
            return .refilled
        }

        let author = event.header.author
        let seq = event.header.seq
        let feedKey = Self.feedKey(author, seq)
        if let existing = try txn.get(feeds, feedKey) {
            // A different event at a position the feed already holds: keep the evidence.
            try txn.put(forks, feedKey + idKey, event.encoded())
            return .refused(.fork(seq: seq, existing: try Self.id32(existing)))
        }
        let head = try readHead(author, in: txn)
        let expected = (head?.seq ?? 0) + 1
        if seq != expected {
            // seq < expected is impossible here: that position would exist in `feeds`.
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
        try txn.put(events, idKey, Self.encodeU64(arrival) + event.encoded())
        try txn.put(feeds, feedKey, idKey)
        try txn.put(heads, author.bytes, Self.encodeU64(seq) + idKey + Self.encodeU64(event.hlc.rawValue))
        try txn.put(arrivals, Self.encodeU64(arrival), idKey, append: true)
        return .accepted(arrival: arrival)
    }

    /// Removes the payload of a stored event, keeping its signed header
    /// (brief decision 8). Returns false when it was already purged or absent.
    @discardableResult
    public func purgePayload(_ id: EventID, in txn: Transaction) throws -> Bool {
        guard let raw = try txn.get(events, id.bytes) else { return false }
        let stored = try Self.decodeStored(raw, id: id)
        guard stored.event.payloadBytes != nil else { return false }
        guard stored.event.kind.payloadIsPurgeable else {
            throw LogError.corrupt("asked to purge event \(id.hex) of kind \(stored.event.kind.name), which is not purgeable")
        }
        try txn.put(events, id.bytes, Self.encodeU64(stored.arrival) + stored.event.purged().encoded())
        return true
    }

    // MARK: Reading (each call is one read transaction; `in:` variants join the caller's)

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

    public func readEvent(_ id: EventID, in txn: Transaction) throws -> StoredEvent? {
        guard let raw = try txn.get(events, id.bytes) else { return nil }
        return try Self.decodeStored(raw, id: id)
    }

    public func event(_ id: EventID) throws -> StoredEvent? {
        try env.read { txn in try readEvent(id, in: txn) }
    }

    /// Events of one feed from `fromSeq`, in sequence order.
    public func feed(_ author: PublicKey, fromSeq: UInt64 = 1, limit: Int = .max) throws -> [StoredEvent] {
        try env.read { txn in
            var out: [StoredEvent] = []
            guard limit > 0 else { return out }
            try txn.scan(feeds, from: Self.feedKey(author, fromSeq)) { key, value in
                guard key.count == 40, key.starts(with: author.bytes) else { return false }
                let id = try Self.id32(value)
                guard let stored = try readEvent(id, in: txn) else {
                    throw LogError.corrupt("feed \(author.short) lists event \(id.hex) that is not stored")
                }
                out.append(stored)
                return out.count < limit
            }
            return out
        }
    }

    /// Events that arrived after position `since`, in arrival order.
    public func arrivals(since: UInt64, limit: Int = .max) throws -> [StoredEvent] {
        try env.read { txn in
            var out: [StoredEvent] = []
            guard limit > 0 else { return out }
            try txn.scan(arrivals, from: Self.encodeU64(since &+ 1)) { _, value in
                let id = try Self.id32(value)
                guard let stored = try readEvent(id, in: txn) else {
                    throw LogError.corrupt("arrival log lists event \(id.hex) that is not stored")
                }
                out.append(stored)
                return out.count < limit
            }
            return out
        }
    }

    /// Like `arrivals(since:limit:)`, but an event that cannot be read is
    /// returned as its id with the error instead of ending the read (for
    /// audits of damaged stores).
    public func arrivalsTolerant(since: UInt64, limit: Int) throws -> [(position: UInt64, id: EventID, stored: Result<StoredEvent, LogError>)] {
        try env.read { txn in
            var out: [(UInt64, EventID, Result<StoredEvent, LogError>)] = []
            guard limit > 0 else { return out }
            try txn.scan(arrivals, from: Self.encodeU64(since &+ 1)) { key, value in
                let position = try Self.decodeU64(key, what: "arrival position")
                let id = try Self.id32(value)
                do {
                    if let stored = try readEvent(id, in: txn) {
                        out.append((position, id, .success(stored)))
                    } else {
                        out.append((position, id, .failure(.corrupt("arrival log lists event \(id.hex) that is not stored"))))
                    }
                } catch let error as LogError {
                    out.append((position, id, .failure(error)))
                }
                return out.count < limit
            }
            return out
        }
    }

    /// The position of the newest arrival (0 for an empty log).
    public func lastArrival() throws -> UInt64 {
        try env.read { txn in
            guard let last = try txn.last(arrivals) else { return 0 }
            return try Self.decodeU64(last.key, what: "arrival position")
        }
    }

    public func eventCount() throws -> Int { try env.read { txn in try txn.count(events) } }

    /// Every stored record in id order, in slices of `sliceSize`: the raw
    /// key and value as they are on disk (for audits that must see damage
    /// that a decoding reader would reject).
    public func rawEventRecords(sliceSize: Int = 10_000, _ body: ([(key: [UInt8], value: [UInt8])]) throws -> Void) throws {
        var from: [UInt8]? = nil
        while true {
            var slice: [([UInt8], [UInt8])] = []
            try env.read { txn in
                try txn.scan(events, from: from) { key, value in
                    if let from, key == from { return true }
                    slice.append((key, value))
                    return slice.count < sliceSize
                }
            }
            guard let last = slice.last else { return }
            try body(slice)
            from = last.0
            if slice.count < sliceSize { return }
        }
    }

    /// Decodes a stored record (u64be arrival || envelope).
    public static func decodeRecord(_ raw: [UInt8], id: EventID) throws -> StoredEvent { try decodeStored(raw, id: id) }

    /// Database sizes in bytes (pages in use), by name.
    public func databaseSizes() throws -> [(name: String, bytes: Int)] {
        [("events", events), ("feeds", feeds), ("heads", heads), ("arrivals", arrivals), ("forks", forks), ("meta", meta)].map {
            ($0.0, (try? env.pageCount(of: $0.1)) ?? 0)
        }
    }

    /// Raw access for tests that damage a store on purpose: writes (or,
    /// with nil, deletes) one entry of a log database.
    public func unsafeWrite(database name: String, key: [UInt8], value: [UInt8]?) throws {
        let db: Database
        switch name {
        case "events": db = events
        case "feeds": db = feeds
        case "heads": db = heads
        case "arrivals": db = arrivals
        case "forks": db = forks
        default: db = meta
        }
        try env.write { txn in
            if let value { try txn.put(db, key, value) } else { try txn.delete(db, key) }
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
                guard let keptRaw = try txn.get(feeds, Array(key[0..<40])) else {
                    throw LogError.corrupt("fork evidence for \(author.short)#\(seq) without a kept event")
                }
                let refused: Event
                do { refused = try Event.decode(value) } catch { throw LogError.corrupt("fork evidence: \(error)") }
                out.append(ForkEvidence(author: author, seq: seq, kept: try Self.id32(keptRaw), refused: refused))
                return true
            }
            return out
        }
    }

    // MARK: Encodings

    static func feedKey(_ author: PublicKey, _ seq: UInt64) -> [UInt8] { author.bytes + encodeU64(seq) }

    public static func encodeU64(_ n: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: n >> (56 - 8 * UInt64($0))) }
    }

    public static func decodeU64(_ b: [UInt8], what: String) throws -> UInt64 {
        guard b.count == 8 else { throw LogError.corrupt("\(what) of \(b.count) bytes") }
        return b.reduce(0) { $0 << 8 | UInt64($1) }
    }

    static func id32(_ b: [UInt8]) throws -> EventID {
        guard let id = Bytes32(b) else { throw LogError.corrupt("event id of \(b.count) bytes") }
        return id
    }

    static func decodeHead(_ raw: [UInt8]) throws -> FeedHead {
        guard raw.count == 48, let id = Bytes32(raw[8..<40]) else { throw LogError.corrupt("feed head of \(raw.count) bytes") }
        return FeedHead(
            seq: try decodeU64(Array(raw[0..<8]), what: "head seq"), id: id,
            hlc: HLC(rawValue: try decodeU64(Array(raw[40..<48]), what: "head hlc")))
    }

    static func decodeStored(_ raw: [UInt8], id: EventID) throws -> StoredEvent {
        guard raw.count > 8 else { throw LogError.corrupt("event \(id.hex) record of \(raw.count) bytes") }
        let arrival = try decodeU64(Array(raw[0..<8]), what: "arrival position")
        let event: Event
        do { event = try Event.decode(Array(raw[8...])) } catch {
            throw LogError.corrupt("event \(id.hex) does not decode: \(error)")
        }
        guard event.id == id else { throw LogError.corrupt("event stored under \(id.hex) has id \(event.id.hex)") }
        return StoredEvent(event: event, arrival: arrival)
    }
}

/// An event as the log holds it, with its local arrival position.
public struct StoredEvent: Sendable, Hashable {
    public let event: Event
    public let arrival: UInt64

    public init(event: Event, arrival: UInt64) {
        self.event = event
        self.arrival = arrival
    }
}

extension LogStore {
    /// Checks every feed against itself and the indexes: each position holds
    /// a stored event that decodes canonically, has the right id, a valid
    /// signature, chains to its predecessor with an increasing timestamp, and
    /// the head and arrival log agree. Returns one line per problem found.
    /// `verifySignatures: false` skips the signature check for callers that
    /// verify every stored event themselves (in parallel).
    public func integrityProblems(verifySignatures: Bool = true) throws -> [String] {
        try env.read { txn in
            var problems: [String] = []
            var eventsInFeeds = 0
            try txn.scan(heads) { key, value in
                guard let author = Bytes32(key) else {
                    problems.append("feed head with a key of \(key.count) bytes")
                    return true
                }
                let head: FeedHead
                do { head = try Self.decodeHead(value) } catch {
                    problems.append("feed \(author.hex): unreadable head")
                    return true
                }
                var prev: (id: EventID, hlc: HLC)? = nil
                for seq in 1...max(head.seq, 1) where head.seq > 0 {
                    guard let idRaw = try txn.get(feeds, Self.feedKey(author, seq)), let id = Bytes32(idRaw) else {
                        problems.append("feed \(author.hex): position \(seq) missing (head is \(head.seq))")
                        prev = nil
                        continue
                    }
                    eventsInFeeds += 1
                    let stored: StoredEvent
                    do {
                        guard let s = try readEvent(id, in: txn) else {
                            problems.append("feed \(author.hex) #\(seq): event \(id.hex) not stored")
                            prev = nil
                            continue
                        }
                        stored = s
                    } catch {
                        problems.append("feed \(author.hex) #\(seq): \(error)")
                        prev = nil
                        continue
                    }
                    let e = stored.event
                    if e.author != author || e.seq != seq { problems.append("feed \(author.hex) #\(seq): holds \(e.author.short)#\(e.seq)") }
                    if verifySignatures && !e.verifySignature() { problems.append("feed \(author.hex) #\(seq): bad signature") }
                    if seq == 1 {
                        if e.header.prev != nil { problems.append("feed \(author.hex) #1: prev is not null") }
                    } else if let prev {
                        if e.header.prev != prev.id { problems.append("feed \(author.hex) #\(seq): does not chain to #\(seq - 1)") }
                        if e.hlc <= prev.hlc { problems.append("feed \(author.hex) #\(seq): timestamp not increasing") }
                    }
                    guard let arrivalID = try txn.get(arrivals, Self.encodeU64(stored.arrival)), arrivalID == id.bytes else {
                        problems.append("feed \(author.hex) #\(seq): arrival \(stored.arrival) does not list it")
                        prev = (id, e.hlc)
                        continue
                    }
                    if seq == head.seq && (id != head.id || e.hlc != head.hlc) {
                        problems.append("feed \(author.hex): head does not match its last event")
                    }
                    prev = (id, e.hlc)
                }
                return true
            }
            let stored = try txn.count(events)
            let arrived = try txn.count(arrivals)
            if stored != eventsInFeeds { problems.append("\(stored) events stored but \(eventsInFeeds) in feeds") }
            if stored != arrived { problems.append("\(stored) events stored but \(arrived) in the arrival log") }
            return problems
        }
    }
}
