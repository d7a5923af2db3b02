import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode

/// Set or clear one field of this user's profile (Specs/events.md §6.2.3).
/// `POST /v1/profile`; `chorus profile set`.
public struct SetProfile: NodeOperation {
    /// `{"id": EVENT, "seq": N}`: the signed event and its place in this device's feed.
    public struct Result: OperationResult {
        /// The event's id.
        public let id: EventID
        /// Its sequence number.
        public let seq: UInt64

        enum Keys: String, CodingKey { case id, seq }

        /// `id` in hex, then `seq`.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(id.hex, forKey: .id)
            try c.encode(seq, forKey: .seq)
        }
    }

    /// The field.
    public let field: ProfileField
    /// The value: text, a picture id's bytes for `avatar`, or null to clear.
    package let value: CBORValue

    /// `field` set to `value` (`.null` clears it).
    package init(_ field: ProfileField, _ value: CBORValue) {
        self.field = field
        self.value = value
    }

    /// The operation for `field` named by its wire name with `text` (an avatar's picture id in hex), or cleared when `text` is nil.
    public init(named name: String, text: String?) throws {
        guard let field = ProfileField(rawValue: name) else {
            throw OperationError(
                .badInput, code: "bad_profile_field",
                "unknown profile field \"\(name.prefix(40))\"; fields are \(ProfileField.settable.map(\.rawValue).joined(separator: ", "))")
        }
        guard let text else {
            self.init(field, .null)
            return
        }
        if field == .avatar {
            guard let id = Bytes32(hex: text.lowercased()) else { throw OperationError.badID(text, what: "avatar (a picture id)") }
            self.init(field, .bytes(id.bytes))
        } else {
            self.init(field, .text(text))
        }
    }

    /// Signs and commits the edit.
    public func run(on node: Node) async throws -> Result {
        let event = try await node.setProfile(field, value)
        return Result(id: event.id, seq: event.seq)
    }
}

extension SetProfile.Result {
    /// `{"id", "seq"}`.
    public static var schema: JSONSchema { .object([("id", .hex32), ("seq", .integer)]) }
}
