import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// An event that took no effect and why, as `noEffects(limit:)` lists it.
public struct NoEffectRecord: Hashable, Sendable {
    /// The event's id.
    public let event: EventID
    /// Its reason (Specs/projections.md §4).
    public let reason: NoEffect
}

/// Errors queries throw for a request they cannot answer.
public enum QueryError: Error, Sendable, CustomStringConvertible {
    /// The `before` cursor is not 40 bytes in hex (HLC and message id).
    case badCursor(String)
    /// This node holds no creation of the chat.
    case unknownChat(ObjectID)

    /// The message shown to people.
    public var description: String {
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
    public func noEffect(_ id: EventID) throws -> NoEffect? {
        try log.env.read { txn in try txn.get(state, Table.noEffect.key(id)).map(Self.decodeNoEffect) }
    }

    /// Every event that took no effect, with the reason.
    public func noEffects(limit: Int = .max) throws -> [NoEffectRecord] {
        try log.env.read { txn in
            var out: [NoEffectRecord] = []
            guard limit > 0 else { return out }
            try txn.scan(state, prefix: [Table.noEffect.rawValue]) { key, value in
                out.append(NoEffectRecord(event: try Codec.b32(key[1...], "event id"), reason: try Self.decodeNoEffect(value)))
                return out.count < limit
            }
            return out
        }
    }

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
    public var code: String {
        switch self {
        case .badCursor: "bad_cursor"
        case .unknownChat: "chat_unknown"
        }
    }
}
