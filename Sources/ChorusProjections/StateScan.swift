import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation

// Reading the stored state as Specs/projections.md §5 defines it:
// entries in key order for diffs, digests and inspection.
extension Projections {
    /// Every state entry in key order (for diffs and tests), as
    /// Specs/projections.md §5 defines it.
    package func stateEntries(in txn: Transaction) throws -> [(key: [UInt8], value: [UInt8])] {
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
        guard let payload = event.payload else { return parties.sorted() }
        switch event.kind {
        case .coinGiven: if let device = (try? CoinGivenPayload(reading: payload))?.device { parties.insert(device) }
        case .coinCredited: if let user = (try? CoinCreditedPayload(reading: payload))?.user { parties.insert(user) }
        default: break
        }
        return parties.sorted()
    }
}
