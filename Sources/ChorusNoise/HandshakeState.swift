/// The handshake patterns this module implements (Noise revision 34, sections 7 and 9).
public enum NoisePattern: String, Sendable, CaseIterable {
    case NN, NNpsk0, XX, XXpsk3

    enum Token { case e, s, ee, es, se, ss, psk }

    var messages: [[Token]] {
        switch self {
        case .NN: return [[.e], [.e, .ee]]
        case .NNpsk0: return [[.psk, .e], [.e, .ee]]
        case .XX: return [[.e], [.e, .ee, .s, .es], [.s, .se]]
        case .XXpsk3: return [[.e], [.e, .ee, .s, .es], [.s, .se, .psk]]
        }
    }

    var usesPSK: Bool { self == .NNpsk0 || self == .XXpsk3 }
    var needsLocalStatic: Bool { self == .XX || self == .XXpsk3 }

    /// The full protocol name with this module's fixed crypto functions.
    public var protocolName: String { "Noise_\(rawValue)_25519_ChaChaPoly_BLAKE2b" }

    /// Parses `Noise_<pattern>_25519_ChaChaPoly_BLAKE2b`; nil for anything else.
    public init?(protocolName: String) {
        let parts = protocolName.split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0] == "Noise", parts[2] == "25519", parts[3] == "ChaChaPoly", parts[4] == "BLAKE2b",
            let pattern = NoisePattern(rawValue: String(parts[1]))
        else { return nil }
        self = pattern
    }
}

/// The two cipher states of a finished handshake, oriented for one side.
public struct TransportCiphers {
    public let send: CipherState
    public let receive: CipherState
}

/// Noise HandshakeState (section 5.3) for the patterns of `NoisePattern`.
/// Not thread-safe. Secrets (ephemeral key, chaining key) are dropped and
/// zeroed by `split()`.
public final class HandshakeState {
    public let pattern: NoisePattern
    public let isInitiator: Bool
    private let symmetric: SymmetricState
    private let s: NoiseKeyPair?
    private var e: NoiseKeyPair?
    private var rs: [UInt8]?
    private var re: [UInt8]?
    private var psk: SecretBytes?
    private var messageIndex = 0
    private var finalHash: [UInt8]?
    private var splitDone = false

    /// - Parameters:
    ///   - ephemeralKey: a fixed ephemeral key, for test vectors only; nil generates one.
    ///   - psk: 32 bytes, required by the psk patterns and refused by the others.
    public init(
        pattern: NoisePattern, initiator: Bool, prologue: [UInt8], staticKey: NoiseKeyPair? = nil,
        ephemeralKey: NoiseKeyPair? = nil, remoteStaticKey: [UInt8]? = nil, psk: [UInt8]? = nil
    ) throws(NoiseError) {
        if pattern.needsLocalStatic, staticKey == nil { throw .missingKey("the local static key") }
        if pattern.usesPSK {
            guard let psk else { throw .missingKey("the pre-shared key") }
            guard psk.count == 32 else { throw .invalidPSK(length: psk.count) }
        } else if psk != nil {
            throw .unsupportedProtocol(pattern.protocolName + " with a PSK")
        }
        if let remoteStaticKey, remoteStaticKey.count != 32 {
            throw .invalidKeyLength(expected: 32, actual: remoteStaticKey.count)
        }
        self.pattern = pattern
        self.isInitiator = initiator
        self.symmetric = SymmetricState(protocolName: pattern.protocolName)
        self.s = staticKey
        self.e = ephemeralKey
        self.rs = remoteStaticKey
        self.psk = psk.map { SecretBytes($0) }
        symmetric.mixHash(prologue)
        // NN and XX have no pre-messages.
    }

    /// True once every handshake message has been written or read.
    public var isComplete: Bool { messageIndex >= pattern.messages.count }

    /// True when the next handshake message is ours to write.
    public var isMyTurn: Bool { !isComplete && (messageIndex % 2 == 0) == isInitiator }

    /// The handshake hash h: final once the handshake is complete (channel binding).
    public var handshakeHash: [UInt8] { finalHash ?? symmetric.h }

    /// The peer's static public key, once received.
    public var remoteStaticKey: [UInt8]? { rs }

    public var localStaticPublicKey: [UInt8]? { s?.publicKey }

    /// WriteMessage(payload, message_buffer).
    public func writeMessage(payload: [UInt8] = []) throws(NoiseError) -> [UInt8] {
        guard !isComplete else { throw .handshakeComplete }
        guard isMyTurn else { throw .wrongTurn }
        var buffer: [UInt8] = []
        for token in pattern.messages[messageIndex] {
            switch token {
            case .e:
                let pair = e ?? NoiseKeyPair.generate()
                e = pair
                buffer += pair.publicKey
                symmetric.mixHash(pair.publicKey)
                if pattern.usesPSK { symmetric.mixKey(pair.publicKey) }
            case .s:
                guard let s else { throw .missingKey("the local static key") }
                buffer += try symmetric.encryptAndHash(s.publicKey)
            case .psk:
                try mixPSK()
            default:
                try mixDH(token)
            }
        }
        buffer += try symmetric.encryptAndHash(payload)
        guard buffer.count <= CipherState.maxMessageLength else {
            throw .messageTooLong(maximum: CipherState.maxMessageLength, actual: buffer.count)
        }
        advance()
        return buffer
    }

    /// ReadMessage(message, payload_buffer): the decrypted payload.
    public func readMessage(_ message: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard !isComplete else { throw .handshakeComplete }
        guard !isMyTurn else { throw .wrongTurn }
        guard message.count <= CipherState.maxMessageLength else {
            throw .messageTooLong(maximum: CipherState.maxMessageLength, actual: message.count)
        }
        let tokens = pattern.messages[messageIndex]
        let minimum = minimumLength(tokens)
        guard message.count >= minimum else { throw .messageTooShort(minimum: minimum, actual: message.count) }
        var offset = 0
        for token in tokens {
            switch token {
            case .e:
                let key = Array(message[offset..<offset + 32])
                offset += 32
                re = key
                symmetric.mixHash(key)
                if pattern.usesPSK { symmetric.mixKey(key) }
            case .s:
                let length = 32 + (symmetric.cipher.hasKey ? CipherState.tagLength : 0)
                let key = try symmetric.decryptAndHash(Array(message[offset..<offset + length]))
                offset += length
                rs = key
            case .psk:
                try mixPSK()
            default:
                try mixDH(token)
            }
        }
        let payload = try symmetric.decryptAndHash(Array(message[offset...]))
        advance()
        return payload
    }

    /// Split(): the transport cipher states, oriented for this side.
    public func split() throws(NoiseError) -> TransportCiphers {
        guard isComplete else { throw .handshakeIncomplete }
        guard !splitDone else { throw .handshakeComplete }
        splitDone = true
        let (c1, c2) = symmetric.split()
        e = nil
        psk = nil
        return isInitiator ? TransportCiphers(send: c1, receive: c2) : TransportCiphers(send: c2, receive: c1)
    }

    // MARK: - internals

    private func advance() {
        messageIndex += 1
        if isComplete { finalHash = symmetric.h }
    }

    /// The smallest valid message for these tokens: keys, encrypted static, and the payload tag.
    private func minimumLength(_ tokens: [NoisePattern.Token]) -> Int {
        // Whether a key is set changes along the way; simulate it.
        var hasKey = symmetric.cipher.hasKey
        var total = 0
        for token in tokens {
            switch token {
            case .e:
                total += 32
                if pattern.usesPSK { hasKey = true }
            case .s: total += 32 + (hasKey ? CipherState.tagLength : 0)
            case .ee, .es, .se, .ss, .psk: hasKey = true
            }
        }
        return total + (hasKey ? CipherState.tagLength : 0)
    }

    private func mixPSK() throws(NoiseError) {
        guard let psk else { throw .missingKey("the pre-shared key") }
        var bytes = psk.copy()
        symmetric.mixKeyAndHash(bytes)
        wipe(&bytes)
    }

    private func mixDH(_ token: NoisePattern.Token) throws(NoiseError) {
        let local: NoiseKeyPair?
        let remote: [UInt8]?
        switch (token, isInitiator) {
        case (.ee, _): (local, remote) = (e, re)
        case (.es, true): (local, remote) = (e, rs)
        case (.es, false): (local, remote) = (s, re)
        case (.se, true): (local, remote) = (s, re)
        case (.se, false): (local, remote) = (e, rs)
        case (.ss, _): (local, remote) = (s, rs)
        default: return
        }
        guard let local else { throw .missingKey("a local key for \(token)") }
        guard let remote else { throw .missingKey("a remote key for \(token)") }
        var shared = try X25519.dh(local, remote)
        symmetric.mixKey(shared)
        wipe(&shared)
    }
}
