import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections

/// A relay of a list: `{"address", "key", "roles": ["home", "inbox"]}`.
public struct RelayShape: Encodable, Sendable {
    let address: String
    let key: String
    let roles: [String]

    /// The shape of `relay`.
    public init(_ relay: Relay) {
        address = relay.address
        key = relay.key.hex
        roles = relay.roles.names
    }
}

extension Relay {
    /// Parses `[ROLES=]KEY@HOST:PORT` (roles `home`, `inbox` or `home,inbox`, the default).
    /// Throws `OperationError` `bad_relay` saying what is wrong.
    public init(parsing text: String) throws {
        func bad(_ why: String) -> OperationError { OperationError(.badInput, code: "bad_relay", why) }
        var rest = Substring(text)
        var roles = Relay.Roles.all
        if let equals = rest.firstIndex(of: "=") {
            let names = rest[..<equals].split(separator: ",").map(String.init)
            guard let parsed = Relay.Roles(names: names) else { throw bad("\"\(text)\": the roles before = are home, inbox or home,inbox") }
            roles = parsed
            rest = rest[rest.index(after: equals)...]
        }
        guard let at = rest.firstIndex(of: "@") else { throw bad("\"\(text)\" is not [ROLES=]KEY@HOST:PORT") }
        let keyText = String(rest[..<at])
        guard let key = Bytes32(hex: keyText.lowercased()) else { throw bad("the relay's KEY must be 64 hex digits, got \"\(keyText)\"") }
        let address = String(rest[rest.index(after: at)...])
        guard RelayAddress.isValid(address) else { throw bad("\"\(address)\" is not HOST:PORT (a DNS name or [IPv6 literal], a port 1...65535)") }
        self.init(address: address, key: key, roles: roles)
    }
}

/// A user's relay list (Specs/projections.md §6.12). `GET /v1/relays`; `chorus relays show`.
public struct GetRelays: NodeOperation {
    /// `{"user", "relays": [RELAY, …], "hlc": HLC|null, "time": TIME|null, "event": ID|null}`.
    public struct Result: OperationResult {
        /// The user.
        public let user: UserID
        /// The list, nil when the user published none.
        public let list: RelayListView?

        enum Keys: String, CodingKey { case user, relays, hlc, time, event }

        /// The list's fields; an unpublished list has no relays, hlc, time or event.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(user.hex, forKey: .user)
            try c.encode((list?.relays ?? []).map(RelayShape.init), forKey: .relays)
            try c.encodeIfPresent(list?.hlc.rawValue, forKey: .hlc)
            try c.encodeIfPresent(list?.hlc.description, forKey: .time)
            try c.encodeIfPresent(list?.event.hex, forKey: .event)
        }
    }

    /// The user, or nil for this node's user.
    public let user: UserID?

    /// The list of `user` (default: this node's user).
    public init(user: UserID? = nil) { self.user = user }

    /// Reads the list.
    public func run(on node: Node) async throws -> Result {
        let user = self.user ?? node.identity.user
        return Result(user: user, list: try node.projections.relays(of: user))
    }
}

/// Publish this user's relay list: the whole list, one relay added (or its
/// roles changed), or one removed by key or address (Specs/events.md §6.2.29).
/// `POST /v1/relays`, `POST /v1/relays/add`, `DELETE /v1/relays/{relay}`; `chorus relays set|add|remove`.
public struct PublishRelays: NodeOperation {
    /// How the list changes.
    public enum Change: Sendable {
        /// Replaced by these relays (none: cleared).
        case set([Relay])
        /// This relay added, or its roles changed when the list has its key.
        case add(Relay)
        /// The relay with this key (hex) or address removed; `relay_not_listed` (404) when none has it.
        case remove(String)
    }

    /// `{"relays": [RELAY, …]}`: the list as published.
    public struct Fields: Encodable, Sendable {
        let relays: [RelayShape]
    }

    /// The change.
    public let change: Change

    /// The list changed by `change`.
    public init(_ change: Change) { self.change = change }

    /// Signs the new list (with the user key when this node holds it) and commits it.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        let current = try node.projections.relays(of: node.identity.user)?.relays ?? []
        let list: [Relay]
        let summary: String
        switch change {
        case .set(let relays):
            list = relays
            summary = relays.isEmpty ? "Cleared your relay list" : "Published \(relays.count) relays"
        case .add(let relay):
            var l = current
            if let i = l.firstIndex(where: { $0.key == relay.key }) { l[i] = relay } else { l.append(relay) }
            list = l
            summary = "Added relay \(relay.address)"
        case .remove(let target):
            list = current.filter { $0.address != target && $0.key.hex != target.lowercased() }
            guard list.count < current.count else {
                throw OperationError(.notFound, code: "relay_not_listed", "your relay list holds no relay \(target)")
            }
            summary = "Removed relay \(target)"
        }
        return MutationReport(Fields(relays: list.map(RelayShape.init)), try await node.setRelays(list), summary: summary)
    }
}

extension RelayShape: SchemaDescribed {
    /// `{"address", "key", "roles"}`.
    public static var schema: JSONSchema {
        .object([("address", .string), ("key", .hex32), ("roles", .array(.oneOfTexts(["home", "inbox"])))])
    }
}

extension GetRelays.Result {
    /// `hlc`, `time` and `event` are null while the user has published no list.
    public static var schema: JSONSchema {
        .object([
            ("user", .hex32), ("relays", .array(.ref("Relay"))), ("hlc", .nullable(.integer)), ("time", .nullable(.string)),
            ("event", .nullable(.hex32)),
        ])
    }
}

extension PublishRelays.Fields: ReportFields {
    /// `{"relays"}`.
    public static var fields: [(String, JSONSchema)] { [("relays", .array(.ref("Relay")))] }
}
