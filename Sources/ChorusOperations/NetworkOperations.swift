import ChorusCrypto
import ChorusNode
import ChorusProjections

/// This node's network configuration: issuers, slot prices, bootstrap
/// relays (Specs/projections.md §1). `GET /v1/network`; `chorus network show`.
public struct GetNetwork: NodeOperation {
    /// `{"issuers", "slot_prices", "bootstrap_relays": [{"address", "key"}, …], "fingerprint"}`.
    public struct Result: OperationResult {
        /// The configuration.
        public let config: NetworkConfig

        struct Bootstrap: Encodable {
            let address: String
            let key: String
        }

        enum Keys: String, CodingKey {
            case issuers, slotPrices = "slot_prices", bootstrapRelays = "bootstrap_relays", fingerprint
        }

        /// The configuration's public fields (never the network key).
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(config.issuers.map(\.hex), forKey: .issuers)
            try c.encode(config.slotPrices, forKey: .slotPrices)
            try c.encode(config.bootstrapRelays.map { Bootstrap(address: $0.address, key: $0.key.hex) }, forKey: .bootstrapRelays)
            try c.encode(config.fingerprint.hex, forKey: .fingerprint)
        }
    }

    /// The configuration of the node it runs on.
    public init() {}

    /// Reads the configuration.
    public func run(on node: Node) async throws -> Result { Result(config: node.network) }
}

/// This network's invite: one line that joins a new node to it (it carries
/// the network key: share it with members only). `GET /v1/network/invite`;
/// `chorus network invite`.
public struct GetInvite: NodeOperation {
    /// `{"invite", "fingerprint"}`.
    public struct Result: OperationResult {
        /// The invite.
        public let invite: String
        /// The configuration's fingerprint in hex.
        public let fingerprint: String
    }

    /// The invite of the node it runs on.
    public init() {}

    /// Reads the invite.
    public func run(on node: Node) async throws -> Result {
        Result(invite: node.network.invite, fingerprint: node.network.fingerprint.hex)
    }
}

extension GetNetwork.Result {
    /// `{"issuers", "slot_prices", "bootstrap_relays", "fingerprint"}`.
    public static var schema: JSONSchema {
        .object([
            ("issuers", .array(.hex32)), ("slot_prices", .array(.integer)),
            ("bootstrap_relays", .array(.object([("address", .string), ("key", .hex32)]))), ("fingerprint", .hex32),
        ])
    }
}

extension GetInvite.Result {
    /// `{"invite", "fingerprint"}`.
    public static var schema: JSONSchema { .object([("invite", .string), ("fingerprint", .hex32)]) }
}
