import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusStorage
import Foundation

/// The public identity of a node: the user it acts for and its own device key.
public struct Identity: Hashable, Sendable {
    /// The user key this node acts for: the Ed25519 key that binds its devices.
    public let user: UserID
    /// This device's Ed25519 key, which signs the node's own events.
    public let device: DeviceID
    /// The issuer key this node holds, if it is one of its network's issuers.
    public let issuer: PublicKey?

    /// Creates an identity from its public keys; `issuer` only for a node holding an issuer key.
    package init(user: UserID, device: DeviceID, issuer: PublicKey? = nil) {
        self.user = user
        self.device = device
        self.issuer = issuer
    }
}

/// Secret key files inside a store directory (`keys/user.secret`,
/// `keys/device.secret`): 64 lowercase hex digits of the Ed25519 seed,
/// readable by the owner only.
enum KeyStore {
    static func keysDirectory(_ store: String) -> String { store + "/keys" }
    static func userKeyPath(_ store: String) -> String { keysDirectory(store) + "/user.secret" }
    static func deviceKeyPath(_ store: String) -> String { keysDirectory(store) + "/device.secret" }
    static func issuerKeyPath(_ store: String) -> String { keysDirectory(store) + "/issuer.secret" }
    /// The device's X25519 secret (Specs/encryption.md §3).
    static func encryptionKeyPath(_ store: String) -> String { keysDirectory(store) + "/encryption.secret" }
    /// A device-only store knows its user's public key but not the secret.
    static func userPublicPath(_ store: String) -> String { keysDirectory(store) + "/user.public" }

    /// Mode 0600 like every file in `keys/` (Specs/storage.md §1).
    static func writePublic(_ key: PublicKey, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw NodeError.keyFile(path: path, problem: "could not write: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let text = Array((key.hex + "\n").utf8)
        let written = text.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
        guard written == text.count, fsync(fd) == 0 else {
            throw NodeError.keyFile(path: path, problem: "could not write: \(String(cString: strerror(errno)))")
        }
    }

    static func readPublic(_ path: String) throws -> PublicKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw NodeError.keyFile(path: path, problem: "missing: this store has neither user.secret nor user.public")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let key = Bytes32(hex: text) else { throw NodeError.keyFile(path: path, problem: "not 64 hex digits of a public key") }
        return key
    }

    static func write(_ key: SigningKey, to path: String) throws { try writeSecret(key.seed, to: path) }

    static func write(_ key: AgreementKey, to path: String) throws { try writeSecret(key.secret, to: path) }

    static func readAgreement(_ path: String) throws -> AgreementKey {
        guard let key = AgreementKey(secret: try readSecret(path)) else {
            throw NodeError.keyFile(path: path, problem: "not 64 hex digits of an X25519 secret")
        }
        return key
    }

    private static func writeSecret(_ secret: [UInt8], to path: String) throws {
        var text = Array((Hex.encode(secret) + "\n").utf8)
        defer { text.withUnsafeMutableBytes { buf in for i in buf.indices { buf[i] = 0 } } }
        do { try OwnerOnlyFile.write(text, to: path, durable: true) } catch {
            throw NodeError.keyFile(path: path, problem: "\(error)")
        }
    }

    static func read(_ path: String) throws -> SigningKey {
        guard let key = SigningKey(seed: try readSecret(path)) else {
            throw NodeError.keyFile(path: path, problem: "not 64 hex digits of an Ed25519 seed")
        }
        return key
    }

    /// The 32 secret bytes of a key file, refused when others may read it.
    private static func readSecret(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw NodeError.keyFile(path: path, problem: "missing or unreadable")
        }
        var st = stat()
        if stat(path, &st) == 0, st.st_mode & 0o077 != 0 {
            throw NodeError.keyFile(
                path: path, problem: "readable by others (mode \(String(st.st_mode & 0o777, radix: 8))); run chmod 600 on it")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let secret = Hex.decode(text), secret.count == 32 else {
            throw NodeError.keyFile(path: path, problem: "not 64 hex digits of a 32-byte secret")
        }
        return secret
    }
}

extension Node {
    /// The device key and encryption key of the store at `path`, to read
    /// its chats without opening the node (the replay tool's `--decrypt`).
    /// nil for a store from before encryption keys.
    package static func epochKeyFinder(at path: String) throws -> EpochKeyFinder? {
        guard FileManager.default.fileExists(atPath: KeyStore.encryptionKeyPath(path)) else { return nil }
        let device = try KeyStore.read(KeyStore.deviceKeyPath(path)).publicKey
        return EpochKeyFinder(device: device, agreement: try KeyStore.readAgreement(KeyStore.encryptionKeyPath(path)))
    }
}
