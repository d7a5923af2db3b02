/// Everything that can go wrong in a Noise handshake or transport message.
/// A handshake that throws is dead: its state must be discarded.
public enum NoiseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The AEAD tag did not verify: wrong key (for example a different PSK),
    /// tampered bytes, or a message out of order.
    case decryptionFailed
    /// A message shorter than the tokens and tag it must carry.
    case messageTooShort(minimum: Int, actual: Int)
    /// A message over the Noise limit of 65535 bytes.
    case messageTooLong(maximum: Int, actual: Int)
    /// The 2^64-1 nonce limit is reached; the cipher state cannot be used.
    case nonceExhausted
    case invalidKeyLength(expected: Int, actual: Int)
    case invalidPrivateKey
    /// The remote public key yields an all-zero DH output (low-order point).
    case invalidPublicKey
    /// The pattern needs a local static key, a PSK, or a remote static key that is missing.
    case missingKey(String)
    /// A PSK must be exactly 32 bytes.
    case invalidPSK(length: Int)
    case unsupportedProtocol(String)
    /// writeMessage when it is the other side's turn, or readMessage when it is ours.
    case wrongTurn
    /// A handshake operation after the handshake completed, or split() before.
    case handshakeComplete
    case handshakeIncomplete

    public var description: String {
        switch self {
        case .decryptionFailed: return "Noise decryption failed (bad key, PSK or tampered message)"
        case .messageTooShort(let minimum, let actual): return "Noise message too short: \(actual) bytes, need at least \(minimum)"
        case .messageTooLong(let maximum, let actual): return "Noise message too long: \(actual) bytes, maximum \(maximum)"
        case .nonceExhausted: return "Noise cipher nonce exhausted (2^64-1)"
        case .invalidKeyLength(let expected, let actual): return "key has \(actual) bytes, expected \(expected)"
        case .invalidPrivateKey: return "invalid X25519 private key"
        case .invalidPublicKey: return "invalid X25519 public key (all-zero shared secret)"
        case .missingKey(let what): return "Noise handshake is missing \(what)"
        case .invalidPSK(let length): return "Noise PSK has \(length) bytes, expected 32"
        case .unsupportedProtocol(let name): return "unsupported Noise protocol \(name)"
        case .wrongTurn: return "Noise handshake message out of turn"
        case .handshakeComplete: return "Noise handshake already complete"
        case .handshakeIncomplete: return "Noise handshake not complete"
        }
    }
}
