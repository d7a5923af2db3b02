import ChorusCrypto
import ChorusNoise

/// One side of a connection's handshake (Specs/sync-transport.md §3): the
/// Noise XXpsk3 messages, then the identity proofs sent over the new
/// transport ciphers. No I/O: the connection writes what it returns and
/// feeds it what the peer sent.
struct ConnectionHandshake {
    /// What the handshake gives the connection once the Noise messages are done.
    struct Keys {
        let send: CipherState
        let receive: CipherState
        let handshakeHash: [UInt8]
        let remoteStaticKey: [UInt8]
        /// This side's identity proof, encrypted with `send`: the next message to write.
        let proofMessage: [UInt8]
    }

    /// What reading a peer's handshake message leads to: a message to write
    /// (none when it is the peer's turn), then, once the Noise handshake is
    /// complete, the keys (write `keys.proofMessage` next, then read the
    /// peer's proof).
    struct Step {
        let reply: [UInt8]?
        let keys: Keys?
    }

    let isInitiator: Bool
    private let configuration: SecureConnectionConfiguration
    private var state: HandshakeState?

    init(configuration: SecureConnectionConfiguration, isInitiator: Bool) throws(NoiseError) {
        self.configuration = configuration
        self.isInitiator = isInitiator
        state = try HandshakeState(
            pattern: SecureConnectionProtocol.pattern, initiator: isInitiator, prologue: SecureConnectionProtocol.prologue,
            staticKey: configuration.staticKey, psk: configuration.networkKey.bytes)
    }

    /// The first message, which only the initiator writes.
    func firstMessage() throws(NoiseError) -> [UInt8]? {
        guard isInitiator, let state else { return nil }
        return try state.writeMessage()
    }

    /// Reads the peer's next handshake message (its payload is empty and ignored).
    mutating func read(_ message: [UInt8]) throws -> Step {
        guard let hs = state else { throw SecureConnectionError.malformedMessage("no handshake in progress") }
        _ = try hs.readMessage(message)
        let reply = !hs.isComplete && hs.isMyTurn ? try hs.writeMessage() : nil
        guard hs.isComplete else { return Step(reply: reply, keys: nil) }
        let ciphers = try hs.split()
        state = nil
        var proof = SecureConnectionProtocol.identityProof(
            signer: configuration.identity, handshakeHash: hs.handshakeHash, signerIsInitiator: isInitiator)
        if let forged = configuration.forgedIdentityKey { proof.replaceSubrange(0..<32, with: forged.bytes) }
        let message: [UInt8]
        do { message = try ciphers.send.encrypt(plaintext: proof) } catch { throw SecureConnectionError.noise(error) }
        return Step(
            reply: reply,
            keys: Keys(
                send: ciphers.send, receive: ciphers.receive, handshakeHash: hs.handshakeHash, remoteStaticKey: hs.remoteStaticKey ?? [],
                proofMessage: message))
    }

    /// The device key the peer's decrypted identity proof proves, or why it proves none.
    static func verifyPeerProof(_ proof: [UInt8], handshakeHash: [UInt8], peerIsInitiator: Bool) throws(SecureConnectionError) -> PublicKey {
        guard proof.count == SecureConnectionProtocol.identityProofLength else {
            throw .identityRejected("proof of \(proof.count) bytes, expected 96")
        }
        guard let key = SecureConnectionProtocol.verifyIdentityProof(proof, handshakeHash: handshakeHash, signerIsInitiator: peerIsInitiator)
        else { throw .identityRejected("the signature does not verify for the key it names") }
        return key
    }
}
