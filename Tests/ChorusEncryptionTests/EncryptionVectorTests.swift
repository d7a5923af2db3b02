import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusTestSupport
import Foundation
import Testing

/// Specs/vectors/encryption.json, written by an independent Python
/// implementation of Specs/encryption.md.
struct EncryptionVectorFile: Decodable, Sendable {
    struct Device: Decodable, Sendable {
        let name: String
        let ed25519_seed: String
        let device: String
        let x25519_secret: String
        let x25519_public: String
    }
    struct Step: Decodable, Sendable {
        let device: String
        let shared_hex: String
        let wrap_key_hex: String
        let ad_hex: String
        let wrap_hex: String
    }
    struct ChatKey: Decodable, Sendable {
        let ephemeral_secret: String
        let ephemeral: String
        let recipients: [String]
        let steps: [Step]
        let wraps_hex: String
        let payload_hex: String
    }
    struct Sealed: Decodable, Sendable, CustomTestStringConvertible {
        let name: String
        let kind_code: UInt64
        let chat: String
        let object: String
        let author: String
        let nonce_hex: String
        let plaintext_hex: String
        let ad_hex: String
        let sealed_hex: String
        var testDescription: String { name }
    }
    struct Attachment: Decodable, Sendable {
        let key_hex: String
        let image_hex: String
        let blob_hex: String
        let blob_hash: String
        let sealed_message_hex: String
    }
    struct Negative: Decodable, Sendable {
        let name: String
        let `case`: String
        let device: String?
        let x25519_secret: String?
        let sealed: String?
        let chat: String?
        let epoch: String?
        let ephemeral: String?
        let wraps_hex: String?
    }
    let devices: [Device]
    let chat: String
    let epoch_key_hex: String
    let epoch: String
    let chat_key: ChatKey
    let sealed: [Sealed]
    let attachment: Attachment
    let negative: [Negative]

    static func load() throws -> EncryptionVectorFile {
        try JSONDecoder().decode(EncryptionVectorFile.self, from: Data(contentsOf: specVector("encryption.json")))
    }
}

private func id(_ s: String) -> Bytes32 {
    guard let b = Bytes32(hex: s) else { preconditionFailure("bad id in encryption.json: \(s)") }
    return b
}

@Suite("Encryption vectors (Specs/vectors/encryption.json)")
struct EncryptionVectorTests {
    let v: EncryptionVectorFile
    init() throws { v = try EncryptionVectorFile.load() }

    func agreementKey(of device: String) throws -> AgreementKey {
        let d = try #require(v.devices.first { $0.device == device })
        return try #require(AgreementKey(secret: hex(d.x25519_secret)))
    }

    @Test func deviceKeysDeriveFromTheirSecrets() throws {
        for d in v.devices {
            #expect(try #require(SigningKey(seed: hex(d.ed25519_seed))).publicKey.hex == d.device)
            #expect(try #require(AgreementKey(secret: hex(d.x25519_secret))).publicKey.hex == d.x25519_public)
        }
    }

    @Test func epochIDCommitsToChatAndKey() {
        #expect(ChatCrypto.epochID(chat: id(v.chat), key: hex(v.epoch_key_hex)).hex == v.epoch)
    }

    @Test func wrapsAndTheChatKeyPayloadMatchByteForByte() throws {
        let ephemeral = try #require(AgreementKey(secret: hex(v.chat_key.ephemeral_secret)))
        #expect(ephemeral.publicKey.hex == v.chat_key.ephemeral)
        let recipients = v.devices.filter { v.chat_key.recipients.contains($0.device) }
            .map { ChatCrypto.Recipient(device: id($0.device), encryptionKey: id($0.x25519_public)) }
        let wraps = try #require(ChatCrypto.wrap(
            epochKey: hex(v.epoch_key_hex), chat: id(v.chat), epoch: id(v.epoch), to: recipients.reversed(), ephemeral: ephemeral))
        #expect(wraps == hex(v.chat_key.wraps_hex))
        for step in v.chat_key.steps {
            let recipient = try #require(v.devices.first { $0.device == step.device })
            #expect(ChatCrypto.wrapKey(ephemeral: ephemeral, recipient: id(recipient.x25519_public)) == hex(step.wrap_key_hex))
            #expect(try agreementKey(of: step.device).sharedSecret(with: ephemeral.publicKey) == hex(step.shared_hex))
        }
        let payload = CBOREncoder.encode(.textMap([
            ("epoch", .bytes(hex(v.epoch))), ("wraps", .bytes(wraps)), ("ephemeral", .bytes(ephemeral.publicKey.bytes)),
        ]))
        #expect(payload == hex(v.chat_key.payload_hex))
        #expect(try EventKind.chatKey.schema?.violation(in: CBORDecoder.decode(payload)) == nil)
        for device in v.chat_key.recipients {
            let key = ChatCrypto.unwrap(
                wraps: wraps, ephemeral: ephemeral.publicKey, chat: id(v.chat), epoch: id(v.epoch), device: id(device),
                with: try agreementKey(of: device))
            #expect(key == hex(v.epoch_key_hex))
        }
    }

    @Test("sealed values match byte for byte and open", arguments: try EncryptionVectorFile.load().sealed)
    func sealedValue(_ s: EncryptionVectorFile.Sealed) throws {
        let kind = EventKind(code: s.kind_code)
        let key = hex(v.epoch_key_hex)
        #expect(ChatCrypto.sealedAD(kind: kind, chat: id(s.chat), object: id(s.object), author: id(s.author)) == hex(s.ad_hex))
        let sealed = ChatCrypto.seal(
            hex(s.plaintext_hex), epochKey: key, epoch: id(v.epoch), nonce: hex(s.nonce_hex), kind: kind, chat: id(s.chat),
            object: id(s.object), author: id(s.author))
        #expect(sealed == hex(s.sealed_hex))
        #expect(ChatCrypto.epoch(ofSealed: sealed)?.hex == v.epoch)
        let opened = ChatCrypto.open(sealed, epochKey: key, kind: kind, chat: id(s.chat), object: id(s.object), author: id(s.author))
        #expect(opened == hex(s.plaintext_hex))
        // The plaintext is a well-formed content of its field.
        switch kind {
        case .chatCreated: #expect(TitleContent.decode(hex(s.plaintext_hex)) != nil)
        case .messageEdited: #expect(MessageContent.decode(hex(s.plaintext_hex), edit: true) != nil)
        default: #expect(MessageContent.decode(hex(s.plaintext_hex)) != nil)
        }
        // Bound to kind, object and author: any other one does not open.
        let other = Blake2b.hash256(Array("elsewhere".utf8))
        #expect(ChatCrypto.open(sealed, epochKey: key, kind: .chatRead, chat: id(s.chat), object: id(s.object), author: id(s.author)) == nil)
        #expect(ChatCrypto.open(sealed, epochKey: key, kind: kind, chat: id(s.chat), object: other, author: id(s.author)) == nil)
        #expect(ChatCrypto.open(sealed, epochKey: key, kind: kind, chat: id(s.chat), object: id(s.object), author: other) == nil)
    }

    @Test func freshNoncesDifferAndOpenLikeTheVectors() throws {
        let s = try #require(v.sealed.first)
        let kind = EventKind(code: s.kind_code), key = hex(v.epoch_key_hex)
        let a = ChatCrypto.seal(hex(s.plaintext_hex), epochKey: key, epoch: id(v.epoch), kind: kind, chat: id(s.chat), object: id(s.object), author: id(s.author))
        let b = ChatCrypto.seal(hex(s.plaintext_hex), epochKey: key, epoch: id(v.epoch), kind: kind, chat: id(s.chat), object: id(s.object), author: id(s.author))
        #expect(a.count == hex(s.sealed_hex).count && a.prefix(32).elementsEqual(hex(v.epoch)))
        #expect(a[32..<56] != b[32..<56])
        // Given its nonce, the fresh value is exactly what the vectors' construction gives.
        let again = ChatCrypto.seal(hex(s.plaintext_hex), epochKey: key, epoch: id(v.epoch), nonce: Array(a[32..<56]), kind: kind,
            chat: id(s.chat), object: id(s.object), author: id(s.author))
        #expect(again == a)
        #expect(ChatCrypto.open(a, epochKey: key, kind: kind, chat: id(s.chat), object: id(s.object), author: id(s.author)) == hex(s.plaintext_hex))
    }

    @Test func attachmentBlobMatchesAndItsKeyTravelsInTheBody() throws {
        let a = v.attachment
        let blob = ChatCrypto.encryptAttachment(hex(a.image_hex), key: hex(a.key_hex))
        #expect(blob == hex(a.blob_hex))
        #expect(Blake2b.hash256(blob).hex == a.blob_hash)
        #expect(ChatCrypto.decryptAttachment(blob, key: hex(a.key_hex)) == hex(a.image_hex))
        let s = try #require(v.sealed.first { $0.sealed_hex == a.sealed_message_hex })
        let content = try #require(MessageContent.decode(hex(s.plaintext_hex)))
        #expect(content.attachment?.key == hex(a.key_hex))
        #expect(content.attachment?.size == UInt64(hex(a.image_hex).count))
    }

    struct MissingField: Error { let name: String }
    func field(_ value: String?, _ n: EncryptionVectorFile.Negative) throws -> String {
        guard let value else { throw MissingField(name: n.name) }
        return value
    }

    @Test func negativeCasesFail() throws {
        let ephemeral = id(v.chat_key.ephemeral)
        for n in v.negative {
            switch n.case {
            case "wrong_device_key":
                let key = try #require(AgreementKey(secret: hex(try field(n.x25519_secret, n))))
                #expect(ChatCrypto.unwrap(
                    wraps: hex(v.chat_key.wraps_hex), ephemeral: ephemeral, chat: id(v.chat), epoch: id(v.epoch),
                    device: id(try field(n.device, n)), with: key) == nil, "\(n.name)")
            case "other_chat":
                let s = try #require(v.sealed.first { $0.name == n.sealed })
                let chat = id(try field(n.chat, n))
                #expect(ChatCrypto.open(
                    hex(s.sealed_hex), epochKey: hex(v.epoch_key_hex), kind: EventKind(code: s.kind_code), chat: chat, object: chat,
                    author: id(s.author)) == nil, "\(n.name)")
            case "epoch_mismatch":
                let key = try #require(AgreementKey(secret: hex(try field(n.x25519_secret, n))))
                #expect(ChatCrypto.unwrap(
                    wraps: hex(try field(n.wraps_hex, n)), ephemeral: id(try field(n.ephemeral, n)), chat: id(v.chat),
                    epoch: id(try field(n.epoch, n)), device: id(try field(n.device, n)), with: key) == nil, "\(n.name)")
            default:
                Issue.record("unknown negative case \(n.case)")
            }
        }
    }
}
