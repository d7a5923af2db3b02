import ChorusCrypto
import ChorusEvents
import ChorusStorage
import Foundation

/// Settings every node of one network shares, because projections depend
/// on them: who may mint coins and what lock slots cost. Two nodes with
/// different configurations may legitimately disagree on balances, so the
/// digest covers the configuration too (Specs/projections.md §1).
public struct NetworkConfig: Sendable, Hashable {
    /// Public keys whose `coin.credited` events take effect.
    public var issuers: [PublicKey]
    /// The price of each lock slot, by slot number; the count is the number
    /// of slots a profile has. Slot 0 is free: its price must be 0.
    public var slotPrices: [UInt64]
    /// The network's pre-shared key: peers prove they hold it in the sync
    /// handshake (Noise `psk3`), so a node outside the network cannot
    /// connect. It does not affect projections and is not in the fingerprint.
    public var networkKey: Bytes32
    /// Relays a node of this network may sync with before it knows any
    /// user's relay list (Specs/projections.md §1): each an address and the
    /// device key its handshake must prove. Like the network key, they do
    /// not affect projections and are not in the fingerprint.
    public var bootstrapRelays: [BootstrapRelay]

    /// Slot prices of a network configured without any: six slots, slot 0 free.
    public static let defaultSlotPrices: [UInt64] = [0, 50, 100, 200, 400, 800]
    /// Most bootstrap relays a configuration holds.
    package static let maxBootstrapRelays = 16

    /// Without `networkKey`, a new network: a fresh random key.
    public init(
        issuers: [PublicKey] = [], slotPrices: [UInt64] = NetworkConfig.defaultSlotPrices, networkKey: Bytes32? = nil,
        bootstrapRelays: [BootstrapRelay] = []
    ) {
        self.issuers = issuers.sorted()
        self.slotPrices = slotPrices
        self.networkKey = networkKey ?? Random.bytes32()
        self.bootstrapRelays = bootstrapRelays
    }

    /// Number of lock slots per profile (1 … 64 in a usable configuration).
    public var slotCount: Int { slotPrices.count }

    /// Problems that make the configuration unusable.
    package var problems: [String] {
        var out: [String] = []
        if slotPrices.isEmpty { out.append("a profile needs at least one slot") }
        if slotPrices.count > 64 { out.append("at most 64 slots") }
        if let first = slotPrices.first, first != 0 { out.append("slot 0 is free: its price must be 0") }
        if Set(issuers).count != issuers.count { out.append("an issuer key is listed twice") }
        if bootstrapRelays.count > Self.maxBootstrapRelays { out.append("at most \(Self.maxBootstrapRelays) bootstrap relays") }
        if Set(bootstrapRelays.map(\.key)).count != bootstrapRelays.count { out.append("a bootstrap relay key is listed twice") }
        if let bad = bootstrapRelays.first(where: { !RelayAddress.isValid($0.address) }) {
            out.append("bootstrap relay address \"\(bad.address)\" is not host:port")
        }
        return out
    }

    /// A fingerprint of the configuration, folded into the projection digest.
    public var fingerprint: Hash32 {
        var bytes: [UInt8] = Array("chorus/network/v1".utf8) + [0, UInt8(issuers.count)]
        for key in issuers.sorted() { bytes += key.bytes }
        bytes.append(UInt8(slotPrices.count))
        for price in slotPrices { bytes += Codec.u64(price) }
        return Blake2b.hash256(bytes)
    }

    // MARK: Invite (Specs/projections.md §1.1)

    static let invitePrefix = "chorus-network1:"

    /// The whole configuration, network key included, as one line to hand to
    /// whoever joins the network (`chorus init --network INVITE`,
    /// `NetworkConfig(invite:)`). It carries the network key: share it like
    /// a password, only with the network's members.
    public var invite: String {
        // Version 1 without bootstrap relays, so that older nodes read it.
        var bytes: [UInt8] = [bootstrapRelays.isEmpty ? 1 : 2] + networkKey.bytes + [UInt8(issuers.count)]
        for key in issuers.sorted() { bytes += key.bytes }
        bytes.append(UInt8(slotPrices.count))
        for price in slotPrices { bytes += Codec.u64(price) }
        if !bootstrapRelays.isEmpty {
            bytes.append(UInt8(bootstrapRelays.count))
            for relay in bootstrapRelays { bytes += relay.key.bytes + [UInt8(relay.address.utf8.count)] + Array(relay.address.utf8) }
        }
        bytes += Blake2b.hash256(bytes).bytes.prefix(4)
        return Self.invitePrefix + Self.base64URL(bytes)
    }

    /// The configuration an invite carries (whitespace around it ignored).
    public init(invite text: String) throws {
        func bad(_ why: String) -> NetworkConfigError { .invalid(source: "from the invite", reason: why) }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.hasPrefix(Self.invitePrefix) else { throw bad("it does not start with \"\(Self.invitePrefix)\"") }
        guard let bytes = Self.fromBase64URL(String(trimmed.dropFirst(Self.invitePrefix.count))), bytes.count >= 1 + 32 + 1 + 1 + 4 else {
            throw bad("it is not base64url text of an invite (cut short or mistyped?)")
        }
        let body = Array(bytes.dropLast(4))
        guard Array(Blake2b.hash256(body).bytes.prefix(4)) == Array(bytes.suffix(4)) else {
            throw bad("its checksum does not match (cut short or mistyped?)")
        }
        guard body[0] == 1 || body[0] == 2 else { throw bad("invite version \(body[0]) is not supported; upgrade Chorus") }
        var i = 1
        guard let key = Bytes32(body[i..<i + 32]) else { throw bad("no network key") }
        i += 32
        let issuerCount = Int(body[i])
        i += 1
        guard body.count >= i + issuerCount * 32 + 1 else { throw bad("it is cut short") }
        var issuers: [PublicKey] = []
        for _ in 0..<issuerCount {
            guard let issuer = Bytes32(body[i..<i + 32]) else { throw bad("an issuer key is cut short") }
            issuers.append(issuer)
            i += 32
        }
        let slotCount = Int(body[i])
        i += 1
        let pricesEnd = i + slotCount * 8
        guard body[0] == 1 ? body.count == pricesEnd : body.count > pricesEnd else {
            throw bad("its slot prices are cut short or followed by extra bytes")
        }
        let prices = (0..<slotCount).map { n in Codec.readU64(body[(i + n * 8)..<(i + n * 8 + 8)]) }
        i = pricesEnd
        var relays: [BootstrapRelay] = []
        if body[0] == 2 {
            let count = Int(body[i])
            i += 1
            guard count >= 1 else { throw bad("a version 2 invite lists at least one bootstrap relay") }
            for _ in 0..<count {
                guard body.count >= i + 33, let relayKey = Bytes32(body[i..<i + 32]) else { throw bad("a bootstrap relay is cut short") }
                let length = Int(body[i + 32])
                i += 33
                guard body.count >= i + length, let address = String(bytes: body[i..<i + length], encoding: .utf8) else {
                    throw bad("a bootstrap relay's address is cut short or not UTF-8")
                }
                i += length
                relays.append(BootstrapRelay(address: address, key: relayKey))
            }
            guard i == body.count else { throw bad("extra bytes after the bootstrap relays") }
        }
        self.init(issuers: issuers, slotPrices: prices, networkKey: key, bootstrapRelays: relays)
        if let problem = problems.first { throw bad(problem) }
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func fromBase64URL(_ text: String) -> [UInt8]? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else { return nil }
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s).map { Array($0) }
    }

    // MARK: File form (network.json in the store directory)

    /// Name of the configuration file in the store directory.
    package static let fileName = "network.json"

    /// The file form (`format` 1, `issuers`, `slot_prices`, `network_key`), as
    /// `write(to:)` stores it (Specs/projections.md §1).
    package func json() -> String {
        let issuers = self.issuers.map { "\"\($0.hex)\"" }.joined(separator: ", ")
        let prices = slotPrices.map(String.init).joined(separator: ", ")
        // Addresses are validated host:port text (no quote or backslash), written as they are.
        let relays =
            bootstrapRelays.isEmpty
            ? "" : ",\n  \"bootstrap_relays\": [" + bootstrapRelays.map { "{\"address\": \"\($0.address)\", \"key\": \"\($0.key.hex)\"}" }.joined(separator: ", ") + "]"
        return
            "{\n  \"format\": 1,\n  \"issuers\": [\(issuers)],\n  \"slot_prices\": [\(prices)],\n  \"network_key\": \"\(networkKey.hex)\"\(relays)\n}\n"
    }

    /// Parses the file form; `source` names it in errors. Throws
    /// `NetworkConfigError.invalid` for bad JSON or a configuration with
    /// `problems`; without `network_key` the configuration gets a fresh random
    /// key.
    package static func parse(json text: String, source: String) throws -> NetworkConfig {
        func bad(_ why: String) -> NetworkConfigError { .invalid(source: source, reason: why) }
        guard let data = text.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { throw bad("not a JSON object") }
        guard (object["format"] as? Int) == 1 else { throw bad("\"format\" must be 1") }
        guard let issuerTexts = object["issuers"] as? [String] else { throw bad("\"issuers\" must be a list of hex keys") }
        var issuers: [PublicKey] = []
        for text in issuerTexts {
            guard let key = Bytes32(hex: text) else { throw bad("issuer \"\(text)\" is not 64 hex digits") }
            issuers.append(key)
        }
        guard let prices = object["slot_prices"] as? [Any] else { throw bad("\"slot_prices\" must be a list") }
        var slotPrices: [UInt64] = []
        for p in prices {
            guard let n = p as? Int, n >= 0 else { throw bad("slot prices must be non-negative integers") }
            slotPrices.append(UInt64(n))
        }
        var networkKey: Bytes32? = nil
        if let text = object["network_key"] {
            guard let hex = text as? String, let key = Bytes32(hex: hex) else { throw bad("\"network_key\" must be 64 hex digits") }
            networkKey = key
        }
        var relays: [BootstrapRelay] = []
        if let list = object["bootstrap_relays"] {
            guard let entries = list as? [[String: Any]] else { throw bad("\"bootstrap_relays\" must be a list of {address, key}") }
            for entry in entries {
                guard let address = entry["address"] as? String, let hex = entry["key"] as? String, let key = Bytes32(hex: hex) else {
                    throw bad("a bootstrap relay needs \"address\" (host:port) and \"key\" (64 hex digits)")
                }
                relays.append(BootstrapRelay(address: address, key: key))
            }
        }
        let config = NetworkConfig(issuers: issuers, slotPrices: slotPrices, networkKey: networkKey, bootstrapRelays: relays)
        if let problem = config.problems.first { throw bad(problem) }
        return config
    }

    /// Loads a configuration; one written before network keys existed gets
    /// a fresh key, saved back when the file is writable.
    package static func load(from path: String) throws -> NetworkConfig {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw NetworkConfigError.missing(path: path)
        }
        let text = String(decoding: data, as: UTF8.self)
        let config = try parse(json: text, source: path)
        if !text.contains("\"network_key\"") { try? config.write(to: path) }
        return config
    }

    /// Writes `json()` to `path` atomically (a file beside it, renamed over
    /// it), readable by the owner only: it holds the network key, which
    /// lets anyone who has it join the network. Throws
    /// `NetworkConfigError.cannotWrite` when that fails.
    package func write(to path: String) throws {
        do { try OwnerOnlyFile.replace(path, with: Array(json().utf8), durable: true) } catch {
            throw NetworkConfigError.cannotWrite(path: path, reason: "\(error)")
        }
    }
}

/// A relay of the network's configuration (`NetworkConfig.bootstrapRelays`):
/// where it listens and the device key its handshake must prove.
public struct BootstrapRelay: Sendable, Hashable {
    /// `host:port` (`RelayAddress`).
    public var address: String
    /// The relay node's device key.
    public var key: PublicKey

    /// A relay at `address` proving `key`.
    public init(address: String, key: PublicKey) {
        self.address = address
        self.key = key
    }
}

/// Why a network configuration could not be loaded, parsed or written.
public enum NetworkConfigError: Error, Sendable, CustomStringConvertible {
    /// The file at `path` is missing or unreadable: `network_config_missing`.
    case missing(path: String)
    /// The configuration from `source` (a path or an invite) is malformed or
    /// breaks a rule of Specs/projections.md §1: `network_config_invalid`.
    case invalid(source: String, reason: String)
    /// Writing the file at `path` failed: `network_config_unwritable`.
    case cannotWrite(path: String, reason: String)

    /// The message shown to people, naming the file or invite.
    public var description: String {
        switch self {
        case .missing(let path): "network configuration \(path) is missing or unreadable"
        case .invalid(let source, let reason): "network configuration \(source) is invalid: \(reason)"
        case .cannotWrite(let path, let reason): "cannot write network configuration \(path): \(reason)"
        }
    }
}

extension NetworkConfigError {
    /// A stable, machine-readable name of the error, in snake case.
    public var code: String {
        switch self {
        case .missing: "network_config_missing"
        case .invalid: "network_config_invalid"
        case .cannotWrite: "network_config_unwritable"
        }
    }
}
