import ChorusCrypto
import ChorusNode
import ChorusReplay

/// Every coin traced from its purchase receipt, with the escrow counter's
/// invariants checked (Specs/projections.md §6.9). `GET /v1/audit`;
/// `chorus query audit`, `chorus-replay audit coins`. Findings are part of
/// the answer (200); the command lines exit 1 when there are any.
public struct AuditCoins: NodeOperation {
    /// `{"issued", "held", "spent", "conserved", "users", "steps", "receipts", "findings"}`.
    public struct Result: OperationResult {
        /// The audit.
        public let audit: CoinAudit

        /// The audit as its JSON.
        public func encode(to encoder: any Encoder) throws { try coinAuditJSON(audit).encode(to: encoder) }
    }

    /// Only this user's devices and coins, or nil for everyone.
    public let user: PublicKey?

    /// The audit of `user`'s coins (default: everyone's).
    public init(user: PublicKey? = nil) { self.user = user }

    /// Replays the coin events in merge order over the node's own store.
    public func run(on node: Node) async throws -> Result {
        let replay = ReplayStore(path: node.storePath, open: node.store)
        return Result(audit: try replay.auditCoins(user: user))
    }
}

/// The coin audit's JSON, as `chorus query audit --json` and `chorus-replay audit coins --json` print it.
package func coinAuditJSON(_ audit: CoinAudit) -> JSONValue {
    .object([
        ("issued", .uint(audit.issued)), ("held", .uint(audit.held)), ("spent", .uint(audit.spent)),
        ("conserved", .bool(audit.conserved)),
        ("users", .array(audit.users.map { u in
            .object([
                ("user", .string(u.user.hex)), ("credits", .uint(u.credits)), ("gifts_received", .uint(u.giftsReceived)),
                ("gifts_given", .uint(u.giftsGiven)), ("spent", .uint(u.spent)), ("balance", .uint(u.balance)),
                ("devices", .object(u.devices.sorted { $0.key < $1.key }.map { ($0.key.hex, .uint($0.value)) })),
            ])
        })),
        ("steps", .array(audit.steps.map { st in
            .object([
                ("event", .string(st.event.hex)), ("hlc", .uint(st.hlc.rawValue)), ("time", .string(st.hlc.description)),
                ("kind", .string(st.kind.name)),
                ("author", .string(st.author.hex)), ("amount", .uint(st.amount)),
                ("from", st.from.map { .string($0.hex) } ?? .null), ("to", st.to.map { .string($0.hex) } ?? .null),
                ("receipt", st.receipt.map { .string($0) } ?? .null),
                ("decision", .string(st.noEffect?.code ?? "applied")),
                ("from_rights_after", st.fromRightsAfter.map { .uint($0) } ?? .null),
                ("to_rights_after", st.toRightsAfter.map { .uint($0) } ?? .null),
            ])
        })),
        ("receipts", .array(audit.receipts.map { r in
            .object([
                ("receipt", .string(r.receipt)), ("credit", .string(r.credit.hex)), ("amount", .uint(r.amount)),
                ("destinations", .object(r.destinations.sorted { $0.key < $1.key }.map { ($0.key, .uint($0.value)) })),
            ])
        })),
        ("findings", .array(audit.findings.map(findingJSON))),
    ])
}

/// A finding of an audit or a verification: `{"code", "message", "event", "location"}`.
package func findingJSON(_ f: Finding) -> JSONValue {
    .object([
        ("code", .string(f.code)), ("message", .string(f.message)), ("event", f.event.map { .string($0.hex) } ?? .null),
        ("location", .string(f.location)),
    ])
}

extension AuditCoins.Result {
    /// What `coinAuditJSON` writes.
    public static var schema: JSONSchema {
        .object([
            ("issued", .integer), ("held", .integer), ("spent", .integer), ("conserved", .boolean),
            (
                "users",
                .array(
                    .object([
                        ("user", .hex32), ("credits", .integer), ("gifts_received", .integer), ("gifts_given", .integer), ("spent", .integer),
                        ("balance", .integer), ("devices", .map(.integer)),
                    ]))
            ),
            (
                "steps",
                .array(
                    .object([
                        ("event", .hex32), ("hlc", .integer), ("time", .string), ("kind", .string), ("author", .hex32), ("amount", .integer),
                        ("from", .nullable(.hex32)), ("to", .nullable(.hex32)), ("receipt", .nullable(.string)), ("decision", .string),
                        ("from_rights_after", .nullable(.integer)), ("to_rights_after", .nullable(.integer)),
                    ]))
            ),
            ("receipts", .array(.object([("receipt", .string), ("credit", .hex32), ("amount", .integer), ("destinations", .map(.integer))]))),
            ("findings", .array(findingSchema)),
        ])
    }
}

/// What `findingJSON` writes.
public let findingSchema = JSONSchema.object([("code", .string), ("message", .string), ("event", .nullable(.hex32)), ("location", .string)])
