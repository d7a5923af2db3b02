import ChorusCrypto
import ChorusNoise
import ChorusStorage
import Foundation

/// Constants and byte layouts of the encrypted transport (Specs/sync-transport.md).
package enum SecureConnectionProtocol {
    /// The Noise handshake pattern: XX with the network key as PSK in position
    /// 3 (Specs/sync-transport.md §1).
    package static let pattern = NoisePattern.XXpsk3
    /// `Noise_XXpsk3_25519_ChaChaPoly_BLAKE2b`.
    package static var protocolName: String { pattern.protocolName }
    /// The Noise prologue, the 14 ASCII bytes `chorus/sync/v1`: it binds the
    /// handshake to this protocol.
    package static let prologue: [UInt8] = Array("chorus/sync/v1".utf8)
    /// The domain-separation string an identity proof's signed message starts
    /// with (Specs/sync-transport.md §3).
    package static let identityContext: [UInt8] = Array("chorus/sync/identity/v1".utf8)
    /// Largest Noise message on the wire, excluding its 2-byte length prefix.
    package static let maxNoiseMessage = 65535
    /// Largest plaintext in one Noise transport message.
    package static let maxNoisePlaintext = 65535 - 16
    /// An identity proof: Ed25519 public key (32) || signature (64).
    package static let identityProofLength = 96
    /// The default largest application frame, 4 MiB (Specs/sync-transport.md
    /// §4); sync connections use the smaller `SyncLimits.maxFrameBytes`.
    package static let defaultMaxFrameSize = 4 << 20

    /// The bytes an identity proof signs:
    /// `"chorus/sync/identity/v1" || 0x00 || handshake hash (64) || role (0 initiator, 1 responder)`.
    package static func identityMessage(handshakeHash: [UInt8], signerIsInitiator: Bool) -> [UInt8] {
        identityContext + [0] + handshakeHash + [signerIsInitiator ? 0 : 1]
    }

    /// The proof `signer` sends as its first transport message.
    package static func identityProof(
        signer: SigningKey, handshakeHash: [UInt8], signerIsInitiator: Bool
    ) -> [UInt8] {
        let message = identityMessage(handshakeHash: handshakeHash, signerIsInitiator: signerIsInitiator)
        return signer.publicKey.bytes + signer.sign(message)
    }

    /// The key a valid proof names, or nil.
    package static func verifyIdentityProof(
        _ proof: [UInt8], handshakeHash: [UInt8], signerIsInitiator: Bool
    ) -> PublicKey? {
        guard proof.count == identityProofLength, let key = PublicKey(Array(proof[0..<32])) else { return nil }
        let message = identityMessage(handshakeHash: handshakeHash, signerIsInitiator: signerIsInitiator)
        guard Ed25519.verify(signature: Array(proof[32..<96]), message: message, publicKey: key) else { return nil }
        return key
    }
}

/// A node's static X25519 key for the sync transport: `keys/noise.secret` in
/// its store directory, 64 lowercase hex digits, mode 0600, created on first use.
package enum NoiseStaticKeyFile {
    /// Where a store keeps its static key: `keys/noise.secret` under the store
    /// directory.
    package static func path(store: String) -> String { store + "/keys/noise.secret" }

    /// Reads the store's static key, or generates and writes one (file mode
    /// 0600, `keys` directory 0700) when there is none yet. Throws
    /// `SecureConnectionError.keyFile` when the file cannot be written, is
    /// readable by others, or does not hold 64 hex digits of an X25519 private
    /// key.
    package static func loadOrCreate(store: String) throws -> NoiseKeyPair {
        let file = path(store: store)
        if FileManager.default.fileExists(atPath: file) { return try load(file) }
        try FileManager.default.createDirectory(
            atPath: store + "/keys", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let pair = NoiseKeyPair.generate()
        var text = Array((pair.privateKey.withUnsafeBytes { Hex.encode($0) } + "\n").utf8)
        defer { text.withUnsafeMutableBytes { buf in for i in buf.indices { buf[i] = 0 } } }
        do { try OwnerOnlyFile.write(text, to: file, durable: true) } catch .exists {
            // Another process created it first: use theirs.
            return try load(file)
        } catch {
            throw SecureConnectionError.keyFile(path: file, problem: "\(error)")
        }
        return pair
    }

    static func load(_ file: String) throws -> NoiseKeyPair {
        var st = stat()
        guard stat(file, &st) == 0 else {
            throw SecureConnectionError.keyFile(path: file, problem: String(cString: strerror(errno)))
        }
        if st.st_mode & 0o077 != 0 {
            throw SecureConnectionError.keyFile(
                path: file, problem: "readable by others (mode \(String(st.st_mode & 0o777, radix: 8))); run chmod 600 on it")
        }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw SecureConnectionError.keyFile(path: file, problem: "unreadable")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard var secret = Hex.decode(text), secret.count == 32, let pair = try? NoiseKeyPair(privateKey: secret) else {
            throw SecureConnectionError.keyFile(path: file, problem: "not 64 hex digits of an X25519 private key")
        }
        for i in secret.indices { secret[i] = 0 }
        return pair
    }
}
