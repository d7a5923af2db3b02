import ChorusCrypto
import ChorusProjections
import ChorusTestSupport
import Foundation
import Testing

@Suite("Network configuration: the invite (Specs/projections.md §1.1)")
struct NetworkConfigTests {
    @Test func anInviteCarriesTheWholeConfigurationNetworkKeyIncluded() throws {
        let issuers = [SigningKey.generate().publicKey, SigningKey.generate().publicKey]
        let config = NetworkConfig(issuers: issuers, slotPrices: [0, 10, 20])
        let joined = try NetworkConfig(invite: config.invite)
        #expect(joined == config)
        #expect(joined.networkKey == config.networkKey)
        #expect(joined.fingerprint == config.fingerprint)
        #expect(try NetworkConfig(invite: "  \(config.invite)\n") == config)
        // Two fresh configurations are two networks: they never share a key.
        #expect(NetworkConfig(issuers: issuers).networkKey != NetworkConfig(issuers: issuers).networkKey)
    }

    @Test func theInviteBytesAreSpecified() throws {
        // §1.1: u8(1) ‖ network key ‖ u8(n) ‖ issuers ‖ u8(m) ‖ u64be prices ‖ first 4 bytes of BLAKE2b-256 of the rest.
        let key = Bytes32([UInt8](repeating: 0x11, count: 32))!
        let issuer = Bytes32([UInt8](repeating: 0x22, count: 32))!
        let config = NetworkConfig(issuers: [issuer], slotPrices: [0, 50], networkKey: key)
        var body: [UInt8] = [1] + key.bytes + [1] + issuer.bytes + [2]
        body += [0, 0, 0, 0, 0, 0, 0, 0] + [0, 0, 0, 0, 0, 0, 0, 50]
        let bytes = body + Blake2b.hash256(body).bytes.prefix(4)
        let b64 = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        #expect(config.invite == "chorus-network1:" + b64)
    }

    @Test("bootstrap relays make a version 2 invite with the bytes §1.1 gives; they travel in the file too and leave the fingerprint alone")
    func bootstrapRelays() throws {
        let key = Bytes32([UInt8](repeating: 0x11, count: 32))!
        let relayKey = Bytes32([UInt8](repeating: 0x33, count: 32))!
        let relay = BootstrapRelay(address: "relay.example:7800", key: relayKey)
        let config = NetworkConfig(slotPrices: [0], networkKey: key, bootstrapRelays: [relay])
        var body: [UInt8] = [2] + key.bytes + [0] + [1] + [0, 0, 0, 0, 0, 0, 0, 0]
        body += [1] + relayKey.bytes + [UInt8(relay.address.utf8.count)] + Array(relay.address.utf8)
        let bytes = body + Blake2b.hash256(body).bytes.prefix(4)
        let b64 = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        #expect(config.invite == "chorus-network1:" + b64)
        let joined = try NetworkConfig(invite: config.invite)
        #expect(joined == config && joined.bootstrapRelays == [relay])
        // Relays change neither the fingerprint nor, when there are none, the invite's version 1.
        #expect(config.fingerprint == NetworkConfig(slotPrices: [0], networkKey: key).fingerprint)
        #expect(Array(NetworkConfig(slotPrices: [0], networkKey: key).invite.utf8).count < Array(config.invite.utf8).count)
        #expect(try NetworkConfig.parse(json: config.json(), source: "test") == config)
        #expect(throws: NetworkConfigError.self) {
            _ = try NetworkConfig.parse(
                json: #"{"format": 1, "issuers": [], "slot_prices": [0], "bootstrap_relays": [{"address": "no-port", "key": "\#(relayKey.hex)"}]}"#,
                source: "test")
        }
    }

    @Test func aDamagedInviteIsRefusedWithTheReason() throws {
        let invite = NetworkConfig(issuers: [SigningKey.generate().publicKey]).invite
        func reason(_ text: String) -> String {
            do {
                _ = try NetworkConfig(invite: text)
                return "accepted"
            } catch { return "\(error)" }
        }
        #expect(reason(String(invite.dropLast(3))).contains("checksum"))
        var chars = Array(invite)
        chars[30] = chars[30] == "A" ? "B" : "A"
        #expect(reason(String(chars)).contains("checksum"))
        #expect(reason("network.json").contains("does not start with"))
        #expect(reason("chorus-network1:***").contains("not base64url"))
    }
}

@Suite("Network configuration: the file")
struct NetworkConfigFileTests {
    @Test("the file holding the network key is readable by its owner only, and written whole")
    func ownerOnly() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.store("network.json")
        let config = NetworkConfig(issuers: [SigningKey.generate().publicKey], slotPrices: [0, 10])
        try config.write(to: path)
        // Rewriting replaces the file; it stays owner-only.
        try config.write(to: path)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o077 } == 0)
        #expect(try NetworkConfig.load(from: path) == config)
        // Nothing but the file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["network.json"])
        // A directory that does not exist is a clear error.
        #expect(throws: NetworkConfigError.self) { try config.write(to: dir.store("missing/network.json")) }
    }
}
