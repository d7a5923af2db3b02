import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// An event that took no effect and why, as `noEffects(limit:)` lists it.
package struct NoEffectRecord: Hashable, Sendable {
    /// The event's id.
    package let event: EventID
    /// Its reason (Specs/projections.md §4).
    package let reason: NoEffect
}

/// Errors queries throw for a request they cannot answer.
package enum QueryError: Error, Sendable, CustomStringConvertible {
    /// The `before` cursor is not 40 bytes in hex (HLC and message id).
    case badCursor(String)
    /// This node holds no creation of the chat.
    case unknownChat(ObjectID)

    /// The message shown to people.
    package var description: String {
        switch self {
        case .badCursor(let c): "\"\(c)\" is not a chat cursor; use the cursor printed with the previous page"
        case .unknownChat(let id): "this node holds no chat \(id.hex)"
        }
    }
}

/// Read-only queries over the projections (the same ones `chorus query`
/// prints), one file per domain beside its fold (ProfileQueries,
/// PictureQueries, RelationshipQueries, ChatQueries, CoinQueries); this one
/// holds the decisions. Each call runs in one LMDB read transaction.
extension Projections {
    // MARK: Decisions

    /// Why an event took no effect, or nil when it took effect (or is unknown).
    package func noEffect(_ id: EventID) throws -> NoEffect? {
        try log.env.read { txn in try noEffect(id, in: txn) }
    }

    /// `noEffect` in the caller's transaction: the stored record, or for a
    /// `message.sent` the reason its withdrawn entry holds (§9.1).
    func noEffect(_ id: EventID, in txn: Transaction) throws -> NoEffect? {
        guard let arrival = try log.readArrival(of: id, in: txn) else { return nil }
        if let stored = try storedNoEffect(at: arrival, in: txn) { return stored }
        guard let sent = try sentEvent(id, at: arrival, in: txn) else { return nil }
        return try withdrawnReason(of: sent.event, in: txn)
    }

    /// `noEffect(_:)` for an event in hand (a mutation just committed): a
    /// `message.sent` is found by its chat and time, without a lookup by id.
    package func noEffect(of event: Event) throws -> NoEffect? {
        try log.env.read { txn in
            if let arrival = try log.readArrival(of: event.id, in: txn), let stored = try storedNoEffect(at: arrival, in: txn) {
                return stored
            }
            return event.kind == .messageSent ? try withdrawnReason(of: event, in: txn) : nil
        }
    }

    /// The no-effect record stored for the event at `arrival` (§9.1).
    private func storedNoEffect(at arrival: UInt64, in txn: Transaction) throws -> NoEffect? {
        try txn.get(state, Self.noEffectKey(arrival)).map(Self.decodeNoEffect)
    }

    /// The reason a `message.sent`'s withdrawn entry holds (§9.1); nil when
    /// it takes effect.
    private func withdrawnReason(of sent: Event, in txn: Transaction) throws -> NoEffect? {
        guard let raw = try txn.get(state, Table.message.key(sent.object, Codec.u64(sent.hlc.rawValue), sent.id)) else { return nil }
        return try MessageEntry.decode(raw).reason
    }

    /// Every event that took no effect, with the reason, in the order of
    /// their ids: the stored records and the withdrawn sends' (§9.1).
    package func noEffects(limit: Int = .max) throws -> [NoEffectRecord] {
        try log.env.read { txn in
            var out: [NoEffectRecord] = []
            guard limit > 0 else { return out }
            try scanNoEffects(in: txn) { record in
                out.append(record)
                return out.count < limit
            }
            return out
        }
    }

    /// Visits every no-effect record in id order until `body` returns false:
    /// the stored ones, keyed by arrival (§9.1), and the withdrawn sends',
    /// from a scan of every message entry.
    func scanNoEffects(in txn: Transaction, _ body: (NoEffectRecord) throws -> Bool) throws {
        var records: [NoEffectRecord] = []
        try txn.scan(state, prefix: [Table.message.rawValue]) { key, value in
            guard try MessageEntry.isWithdrawn(value), let reason = try MessageEntry.decode(value).reason else { return true }
            records.append(NoEffectRecord(event: try Codec.b32(key.suffix(32), "message id"), reason: reason))
            return true
        }
        try txn.scan(state, prefix: [Table.noEffect.rawValue]) { key, value in
            records.append(NoEffectRecord(event: try noEffectEvent(key, in: txn), reason: try Self.decodeNoEffect(value)))
            return true
        }
        records.sort { $0.event < $1.event }
        for record in records where try !body(record) { return }
    }

    /// A no-effect record's value (Specs/projections.md §5, table 0x7F).
    static func encodeNoEffect(_ reason: NoEffect) -> [UInt8] { Codec.cbor(.array([.text(reason.code), .text(reason.detail)])) }

    static func decodeNoEffect(_ raw: [UInt8]) throws -> NoEffect {
        let v = try Codec.decode(raw, "no-effect record")
        guard let a = v.arrayValue, a.count == 2, let code = a[0].textValue, let detail = a[1].textValue else {
            throw ProjectionError.corrupt("no-effect record")
        }
        return NoEffect(code, detail)
    }
}

extension QueryError {
    /// A stable, machine-readable name of the error, in snake case.
    package var code: String {
        switch self {
        case .badCursor: "bad_cursor"
        case .unknownChat: "chat_unknown"
        }
    }
}
