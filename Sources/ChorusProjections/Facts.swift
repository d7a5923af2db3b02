import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage

/// One event as a projection sees it: its `facts` entry (merge order, kind,
/// header object, arrival position) with the payload read from the log.
struct Fact {
    let order: MergeOrder
    let kind: EventKind
    let object: Bytes32
    /// Where the log holds the event (its payload, and the purge target).
    let arrival: UInt64
    /// nil when the payload is purged.
    let payload: CBORValue?

    var id: EventID { order.id }
    var author: PublicKey { order.author }
    var hlc: HLC { order.hlc }

    /// The typed payload (Sources/ChorusEvents/Payloads.swift). Every fact's
    /// payload passed its schema before it was stored, so a failure here is
    /// a damaged store.
    func read<P: KindPayload>(_ type: P.Type) throws -> P {
        guard let payload else { throw ProjectionError.corrupt("\(kind.name) fact without its payload") }
        do { return try P(reading: payload) } catch { throw ProjectionError.corrupt("\(kind.name) fact: \(error)") }
    }

    /// The typed payload, or nil when it is purged here (or, which its
    /// schema check rules out, does not read as its kind).
    func readIfHeld<P: KindPayload>(_ type: P.Type) -> P? { payload.flatMap { try? P(reading: $0) } }

    init(order: MergeOrder, kind: EventKind, object: Bytes32, arrival: UInt64, payload: CBORValue?) {
        self.order = order
        self.kind = kind
        self.object = object
        self.arrival = arrival
        self.payload = payload
    }

    init(_ stored: StoredEvent) {
        self.init(
            order: MergeOrder(stored.event), kind: stored.event.kind, object: stored.event.object, arrival: stored.arrival,
            payload: stored.event.payload)
    }

    /// The `facts` value of an event filed under `object`: u8(kind) ‖
    /// u64be(arrival) (9 bytes) when `object` is the header's object, as
    /// for every class but coins; else u8(kind) ‖ header object (32) ‖
    /// u64be(arrival) (41 bytes). Specs/projections.md §9.1.
    static func encode(_ stored: StoredEvent, filedUnder object: Bytes32) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(41)
        out.append(UInt8(truncatingIfNeeded: stored.event.kind.code))
        if object != stored.event.object { stored.event.object.append(to: &out) }
        out += Codec.u64(stored.arrival)
        return out
    }

    /// Reads a `facts` entry and its payload from the log.
    static func load(
        key: [UInt8], value raw: [UInt8], log: LogStore, in txn: Transaction, preloaded: PreloadedPayloads? = nil,
        withPayload: Bool = true
    ) throws -> Fact {
        guard let filedUnder = Bytes32(key.dropFirst().prefix(32)) else { throw ProjectionError.corrupt("fact key of \(key.count) bytes") }
        return try load(
            order: try MergeOrder(bytes: key[33...]), value: raw, filedUnder: filedUnder, log: log, in: txn,
            preloaded: preloaded, withPayload: withPayload)
    }

    /// The kind a fact's value names; nil for a value that names none
    /// this version knows (`load` reports it as damage).
    static func kind(ofValue raw: [UInt8]) -> EventKind? {
        raw.first.flatMap { EventKind(knownCode: UInt64($0)) }
    }

    /// The arrival position a fact's value names.
    static func arrival(ofValue raw: [UInt8]) -> UInt64? {
        raw.count == 41 || raw.count == 9 ? Codec.readU64(raw[(raw.count - 8)...]) : nil
    }

    /// `withPayload: false` leaves `payload` nil without reading the log,
    /// for a fold that does not read this fact's payload. `filedUnder` is
    /// the object of the fact's key: a 9-byte value's header object (any
    /// event may name the object it is filed under, the zero id of the
    /// coin facts included).
    static func load(
        order: MergeOrder, value raw: [UInt8], filedUnder: Bytes32, log: LogStore, in txn: Transaction,
        preloaded: PreloadedPayloads? = nil, withPayload: Bool = true
    ) throws -> Fact {
        let object: Bytes32
        if raw.count == 41, let named = Bytes32(raw[1..<33]) {
            object = named
        } else if raw.count == 9 {
            object = filedUnder
        } else {
            throw ProjectionError.corrupt("fact of \(raw.count) bytes")
        }
        guard let kind = EventKind(knownCode: UInt64(raw[0])) else { throw ProjectionError.corrupt("fact of unknown kind \(raw[0])") }
        let arrival = Codec.readU64(raw[(raw.count - 8)...])
        if !withPayload { return Fact(order: order, kind: kind, object: object, arrival: arrival, payload: nil) }
        if let preloaded, let payload = preloaded.payloads[arrival] {
            return Fact(order: order, kind: kind, object: object, arrival: arrival, payload: payload)
        }
        var payload: CBORValue? = nil
        if let bytes = try log.readPayload(at: arrival, in: txn) {
            do { payload = try CBORDecoder.decode(bytes) } catch {
                throw ProjectionError.corrupt("payload of the event at arrival \(arrival) does not decode: \(error)")
            }
        }
        return Fact(order: order, kind: kind, object: object, arrival: arrival, payload: payload)
    }
}

/// Decoded payloads of the facts a bulk fold is about to read, by arrival
/// position (`.some(nil)`: purged), taken from what the rebuild's filing
/// kept (`FiledPayloads`) or else read from the log in arrival order, and
/// decoded on all cores before the fold (Specs/projections.md §9.2).
struct PreloadedPayloads: Sendable {
    var payloads: [UInt64: CBORValue?] = [:]

    /// Reads and decodes the payloads of the events at `arrivals`: those
    /// `filed` holds from there, the others from the log.
    static func load(_ arrivals: [UInt64], log: LogStore, filed: FiledPayloads = FiledPayloads()) throws -> PreloadedPayloads {
        let sorted = Array(Set(arrivals)).sorted()
        var raw: [(UInt64, [UInt8]?)] = []
        raw.reserveCapacity(sorted.count)
        var unread: [Int] = []
        for arrival in sorted {
            if let held = filed.payload(at: arrival) {
                raw.append((arrival, held))
            } else {
                unread.append(raw.count)
                raw.append((arrival, nil))
            }
        }
        if !unread.isEmpty {
            try log.env.read { txn in
                for i in unread { raw[i].1 = try log.readPayload(at: raw[i].0, in: txn) }
            }
        }
        let decoded = parallelMap(raw, chunk: 256) { arrival, bytes -> Result<(UInt64, CBORValue?), Error> in
            Result {
                guard let bytes else { return (arrival, nil) }
                do { return (arrival, try CBORDecoder.decode(bytes)) } catch {
                    throw ProjectionError.corrupt("payload of the event at arrival \(arrival) does not decode: \(error)")
                }
            }
        }
        var out = PreloadedPayloads()
        out.payloads.reserveCapacity(decoded.count)
        for result in decoded {
            let (arrival, payload) = try result.get()
            out.payloads[arrival] = .some(payload)
        }
        return out
    }
}

/// The payloads a rebuild's filing copied from the log as it read it, for
/// the fold of the classes after it (Specs/projections.md §9.2): that fold
/// takes them in key order of its objects, which is random in arrival
/// order, so reading them from the log again costs a B-tree descent and a
/// cache miss each. Held in arrival order, up to a budget; a payload past
/// it is read from the log.
struct FiledPayloads: Sendable {
    /// Each payload's arrival position, increasing, and where its bytes are
    /// (`count` -1: purged).
    private var entries: [(arrival: UInt64, start: Int, count: Int)] = []
    private var bytes: [UInt8] = []

    var count: Int { entries.count }
    /// Bytes held, the per-entry records included: what counts against the budget.
    var memoryBytes: Int { bytes.count + entries.count * MemoryLayout<(UInt64, Int, Int)>.stride }

    /// Keeps the payload of the event at `arrival` (nil: purged), which
    /// follows every arrival kept so far.
    mutating func add(_ arrival: UInt64, _ payload: [UInt8]?) {
        precondition(entries.last.map { $0.arrival < arrival } ?? true, "payloads are filed in arrival order")
        entries.append((arrival, bytes.count, payload?.count ?? -1))
        if let payload { bytes += payload }
    }

    /// Appends `other`, whose arrivals all follow these.
    mutating func append(_ other: FiledPayloads) {
        precondition(
            entries.last.map { last in other.entries.first.map { last.arrival < $0.arrival } ?? true } ?? true,
            "payloads are filed in arrival order")
        let base = bytes.count
        entries += other.entries.lazy.map { ($0.arrival, $0.start + base, $0.count) }
        bytes += other.bytes
    }

    /// The payload kept for `arrival`: `.some(nil)` when it was purged, nil
    /// when none was kept.
    func payload(at arrival: UInt64) -> [UInt8]?? {
        var low = 0
        var high = entries.count
        while low < high {
            let mid = (low + high) / 2
            if entries[mid].arrival < arrival { low = mid + 1 } else { high = mid }
        }
        guard low < entries.count, entries[low].arrival == arrival else { return nil }
        let e = entries[low]
        return .some(e.count < 0 ? nil : Array(bytes[e.start..<(e.start + e.count)]))
    }
}
