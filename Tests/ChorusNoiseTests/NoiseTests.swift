import ChorusCrypto
import ChorusTestSupport
import Foundation
import Testing

@testable import ChorusNoise


struct NoiseVector: Decodable, Sendable, CustomTestStringConvertible {
    struct Message: Decodable, Sendable {
        let payload: String
        let ciphertext: String
    }
    let protocol_name: String
    let init_prologue: String
    let init_psks: [String]?
    let init_static: String?
    let init_ephemeral: String
    let init_remote_static: String?
    let resp_prologue: String
    let resp_psks: [String]?
    let resp_static: String?
    let resp_ephemeral: String
    let resp_remote_static: String?
    let handshake_hash: String
    let messages: [Message]

    var testDescription: String { protocol_name }
}

private struct VectorFile: Decodable { let vectors: [NoiseVector] }

private func loadVectors() throws -> [NoiseVector] {
    let url = specVector("noise/cacophony-25519-ChaChaPoly-BLAKE2b.json")
    return try JSONDecoder().decode(VectorFile.self, from: Data(contentsOf: url)).vectors
}

private func vectorHex(_ s: String) throws -> [UInt8] {
    try #require(Hex.decode(s), "bad hex in the vector file")
}

private func keyPair(_ s: String?) throws -> NoiseKeyPair? {
    guard let s else { return nil }
    return try NoiseKeyPair(privateKey: vectorHex(s))
}

@Suite("Noise vectors (Specs/vectors/noise)")
struct NoiseVectorTests {
    @Test func fileHoldsAllFourProtocols() throws {
        let names = Set(try loadVectors().map(\.protocol_name))
        #expect(names == Set(NoisePattern.allCases.map(\.protocolName)))
    }

    @Test(arguments: try loadVectors())
    func vector(_ v: NoiseVector) throws {
        let pattern = try #require(NoisePattern(protocolName: v.protocol_name))
        let initiator = try HandshakeState(
            pattern: pattern, initiator: true, prologue: vectorHex(v.init_prologue), staticKey: keyPair(v.init_static),
            ephemeralKey: keyPair(v.init_ephemeral), remoteStaticKey: v.init_remote_static.map(hex),
            psk: v.init_psks?.first.map(hex))
        let responder = try HandshakeState(
            pattern: pattern, initiator: false, prologue: vectorHex(v.resp_prologue), staticKey: keyPair(v.resp_static),
            ephemeralKey: keyPair(v.resp_ephemeral), remoteStaticKey: v.resp_remote_static.map(hex),
            psk: v.resp_psks?.first.map(hex))
        #expect((v.init_psks?.count ?? 0) <= 1)

        var ciphers: (initiator: TransportCiphers, responder: TransportCiphers)? = nil
        for (index, message) in v.messages.enumerated() {
            let payload = try vectorHex(message.payload)
            let expected = try vectorHex(message.ciphertext)
            let initiatorSends = index % 2 == 0
            if let c = ciphers {
                let (sender, receiver) = initiatorSends ? (c.initiator, c.responder) : (c.responder, c.initiator)
                let ciphertext = try sender.send.encrypt(plaintext: payload)
                #expect(ciphertext == expected, "transport message \(index)")
                #expect(try receiver.receive.decrypt(ciphertext: ciphertext) == payload)
            } else {
                let (writer, reader) = initiatorSends ? (initiator, responder) : (responder, initiator)
                #expect(writer.isMyTurn && !reader.isMyTurn)
                let ciphertext = try writer.writeMessage(payload: payload)
                #expect(ciphertext == expected, "handshake message \(index)")
                #expect(try reader.readMessage(ciphertext) == payload)
                if initiator.isComplete {
                    #expect(responder.isComplete)
                    #expect(initiator.handshakeHash == (try vectorHex(v.handshake_hash)))
                    #expect(responder.handshakeHash == initiator.handshakeHash)
                    ciphers = (try initiator.split(), try responder.split())
                }
            }
        }
        #expect(ciphers != nil, "the vector's messages finish the handshake")
        if let rs = v.init_static, pattern == .XX || pattern == .XXpsk3 {
            #expect(responder.remoteStaticKey == (try keyPair(rs))?.publicKey)
            #expect(initiator.remoteStaticKey == (try keyPair(v.resp_static))?.publicKey)
        }
    }
}

@Suite("Noise primitives and failures")
struct NoiseBehaviourTests {
    /// RFC 4231-style sanity: HMAC with a key longer than a block hashes it first.
    @Test func hmacMatchesDefinition() {
        let key = [UInt8](repeating: 0xaa, count: 131)
        let data: [UInt8] = Array("message".utf8)
        let k = NoiseHash.hash(key) + [UInt8](repeating: 0, count: 64)
        let inner = NoiseHash.hash(k.map { $0 ^ 0x36 }, data)
        let expected = NoiseHash.hash(k.map { $0 ^ 0x5c }, inner)
        #expect(NoiseHash.hmac(key: key, data: [data]) == expected)
        #expect(NoiseHash.hash([]).count == 64)
    }

    private func pair(_ pattern: NoisePattern, psk1: [UInt8]?, psk2: [UInt8]?) throws -> (HandshakeState, HandshakeState) {
        let i = try HandshakeState(
            pattern: pattern, initiator: true, prologue: [1], staticKey: .generate(), psk: psk1)
        let r = try HandshakeState(
            pattern: pattern, initiator: false, prologue: [1], staticKey: .generate(), psk: psk2)
        return (i, r)
    }

    @Test func wrongPSKFailsDecryption() throws {
        let (i, r) = try pair(.XXpsk3, psk1: Random.bytes(32), psk2: Random.bytes(32))
        _ = try r.readMessage(i.writeMessage())
        _ = try i.readMessage(r.writeMessage())
        let m3 = try i.writeMessage()
        #expect(throws: NoiseError.decryptionFailed) { try r.readMessage(m3) }
    }

    @Test func tamperedMessageFails() throws {
        let psk = Random.bytes(32)
        let (i, r) = try pair(.XXpsk3, psk1: psk, psk2: psk)
        _ = try r.readMessage(i.writeMessage())
        var m2 = try r.writeMessage(payload: [1, 2, 3])
        m2[40] ^= 1
        #expect(throws: NoiseError.decryptionFailed) { try i.readMessage(m2) }
    }

    @Test func shortMessagesAndTurnsAreRefused() throws {
        let psk = Random.bytes(32)
        let (i, r) = try pair(.XXpsk3, psk1: psk, psk2: psk)
        #expect(throws: NoiseError.wrongTurn) { try r.writeMessage() }
        #expect(throws: NoiseError.messageTooShort(minimum: 32 + 16, actual: 10)) { try r.readMessage([UInt8](repeating: 0, count: 10)) }
        #expect(throws: NoiseError.handshakeIncomplete) { try i.split() }
        #expect(throws: NoiseError.invalidPSK(length: 3)) {
            try HandshakeState(pattern: .NNpsk0, initiator: true, prologue: [], psk: [1, 2, 3])
        }
        #expect(throws: NoiseError.missingKey("the local static key")) {
            try HandshakeState(pattern: .XX, initiator: true, prologue: [])
        }
    }

    @Test func zeroPublicKeyIsRefused() throws {
        let r = try HandshakeState(pattern: .NN, initiator: false, prologue: [])
        // An all-zero ephemeral is a low-order point: reading it succeeds, the
        // all-zero DH output at `ee` is refused.
        _ = try r.readMessage([UInt8](repeating: 0, count: 32))
        #expect(throws: NoiseError.invalidPublicKey) { try r.writeMessage() }
    }

    @Test func nonceLimitAndRekey() throws {
        let key = Random.bytes(32)
        let a = CipherState(key: key)
        let b = CipherState(key: key)
        a.setNonce(UInt64.max - 1)
        b.setNonce(UInt64.max - 1)
        let c = try a.encrypt(plaintext: [7])
        #expect(try b.decrypt(ciphertext: c) == [7])
        #expect(throws: NoiseError.nonceExhausted) { try a.encrypt(plaintext: [7]) }
        #expect(throws: NoiseError.nonceExhausted) { try b.decrypt(ciphertext: c) }

        let x = CipherState(key: key)
        let y = CipherState(key: key)
        x.rekey()
        let sealed = try x.encrypt(plaintext: [1, 2])
        #expect(throws: NoiseError.decryptionFailed) { try y.decrypt(ciphertext: sealed) }
        #expect(y.nonce == 0, "a failed decryption does not advance the nonce")
        y.rekey()
        #expect(try y.decrypt(ciphertext: sealed) == [1, 2])
    }
}
