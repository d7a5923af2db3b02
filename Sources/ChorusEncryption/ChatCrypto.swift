import ChorusCBOR
import ChorusCrypto
import ChorusEvents

/// The constructions of Specs/encryption.md: epoch ids, key wraps, sealed
/// values and encrypted attachments. Pure functions; randomness (keys,
/// nonces, ephemeral keys) is passed in so the vectors can fix it.
package enum ChatCrypto {
    static func ctx(_ s: String) -> [UInt8] { Array(s.utf8) + [0] }
    static let epochContext = ctx("chorus/chat-epoch/v1")
    static let keyContext = ctx("chorus/chat-key/v1")
    static let sealedContext = ctx("chorus/sealed/v1")
    static let attachmentContext = ctx("chorus/attachment/v1")
    static let zeroNonce = [UInt8](repeating: 0, count: XChaCha20Poly1305.nonceLength)

    /// `epoch_id(chat, K)` (§4): names an epoch and commits to its key.
    package static func epochID(chat: ObjectID, key: [UInt8]) -> Hash32 {
        Blake2b.hash256(epochContext + chat.bytes + key)
    }

    /// A recipient of a key event: a device's Ed25519 key and its published X25519 key.
    package struct Recipient: Hashable, Sendable {
        /// The recipient device's Ed25519 key; wraps are labelled and ordered by it.
        package let device: PublicKey
        /// The device's X25519 public key, as published in its `device.key` event
        /// (Specs/encryption.md §3).
        package let encryptionKey: Bytes32
        /// Pairs a device with its published encryption key.
        package init(device: PublicKey, encryptionKey: Bytes32) {
            self.device = device
            self.encryptionKey = encryptionKey
        }
    }

    /// The `wraps` of a `chat.key` event (§5): one 80-byte wrap per
    /// recipient, ordered by device key. nil if a recipient's key is unusable
    /// (small order), which an honest device never publishes.
    package static func wrap(
        epochKey: [UInt8], chat: ObjectID, epoch: Hash32, to recipients: [Recipient], ephemeral: AgreementKey
    ) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(recipients.count * PayloadLimits.wrapBytes)
        var last: PublicKey? = nil
        for r in recipients.sorted(by: { $0.device < $1.device }) {
            if r.device == last { continue }
            last = r.device
            guard let kw = wrapKey(shared: ephemeral.sharedSecret(with: r.encryptionKey), ephemeral: ephemeral.publicKey,
                recipient: r.encryptionKey)
            else { return nil }
            out += r.device.bytes
            out += XChaCha20Poly1305.seal(
                key: kw, nonce: zeroNonce, ad: keyContext + chat.bytes + epoch.bytes + r.device.bytes, message: epochKey)
        }
        return out
    }

    static func wrapKey(shared: [UInt8]?, ephemeral: Bytes32, recipient: Bytes32) -> [UInt8]? {
        guard let shared else { return nil }
        return Blake2b.keyedHash256(key: shared, keyContext + ephemeral.bytes + recipient.bytes).bytes
    }

    /// The key-wrapping key of one recipient (exposed for the vectors).
    package static func wrapKey(ephemeral: AgreementKey, recipient: Bytes32) -> [UInt8]? {
        wrapKey(shared: ephemeral.sharedSecret(with: recipient), ephemeral: ephemeral.publicKey, recipient: recipient)
    }

    /// Opens `device`'s wrap in `wraps` with the device's encryption key,
    /// and checks the key against the epoch id. nil if there is no such wrap
    /// or any step fails.
    package static func unwrap(
        wraps: [UInt8], ephemeral: Bytes32, chat: ObjectID, epoch: Hash32, device: PublicKey, with key: AgreementKey
    ) -> [UInt8]? {
        let size = PayloadLimits.wrapBytes
        guard wraps.count % size == 0 else { return nil }
        for start in stride(from: 0, to: wraps.count, by: size) where wraps[start..<start + 32].elementsEqual(device.bytes) {
            guard let kw = wrapKey(shared: key.sharedSecret(with: ephemeral), ephemeral: ephemeral, recipient: key.publicKey),
                let epochKey = XChaCha20Poly1305.open(
                    key: kw, nonce: zeroNonce, ad: keyContext + chat.bytes + epoch.bytes + device.bytes,
                    ciphertext: Array(wraps[(start + 32)..<(start + size)])),
                epochID(chat: chat, key: epochKey) == epoch
            else { return nil }
            return epochKey
        }
        return nil
    }

    /// The associated data of a sealed value (§7).
    package static func sealedAD(kind: EventKind, chat: ObjectID, object: ObjectID, author: PublicKey) -> [UInt8] {
        var ad: [UInt8] = []
        ad.reserveCapacity(sealedContext.count + 8 + 96)
        ad.append(contentsOf: sealedContext)
        withUnsafeBytes(of: kind.code.bigEndian) { ad.append(contentsOf: $0) }
        chat.append(to: &ad)
        object.append(to: &ad)
        author.append(to: &ad)
        return ad
    }

    /// `epoch || nonce || AEAD(K, nonce, ad, plaintext)` (§7).
    package static func seal(
        _ plaintext: [UInt8], epochKey: [UInt8], epoch: Hash32, nonce: [UInt8], kind: EventKind, chat: ObjectID,
        object: ObjectID, author: PublicKey
    ) -> [UInt8] {
        epoch.bytes + nonce
            + XChaCha20Poly1305.seal(
                key: epochKey, nonce: nonce, ad: sealedAD(kind: kind, chat: chat, object: object, author: author), message: plaintext)
    }

    /// The epoch a sealed value names.
    package static func epoch(ofSealed sealed: [UInt8]) -> Hash32? {
        sealed.count >= PayloadLimits.sealedOverhead ? Bytes32(sealed[0..<32]) : nil
    }

    /// `seal` with a fresh random nonce (what devices do; `seal` with a
    /// given nonce is for the vectors).
    package static func seal(
        _ plaintext: [UInt8], epochKey: [UInt8], epoch: Hash32, kind: EventKind, chat: ObjectID, object: ObjectID, author: PublicKey
    ) -> [UInt8] {
        XChaCha20Poly1305.sealWithFreshNonce(
            key: epochKey, prefix: epoch.bytes, ad: sealedAD(kind: kind, chat: chat, object: object, author: author), message: plaintext)
    }

    /// The plaintext, or nil if the value does not open with this key under
    /// this event's chat, kind, object and author.
    package static func open(
        _ sealed: [UInt8], epochKey: [UInt8], kind: EventKind, chat: ObjectID, object: ObjectID, author: PublicKey
    ) -> [UInt8]? {
        guard sealed.count >= PayloadLimits.sealedOverhead else { return nil }
        return XChaCha20Poly1305.open(
            key: epochKey, sealed: sealed, nonceOffset: 32, ad: sealedAD(kind: kind, chat: chat, object: object, author: author))
    }

    /// The blob bytes of a picture sent in a chat, encrypted with its own key (§7).
    package static func encryptAttachment(_ image: [UInt8], key: [UInt8]) -> [UInt8] {
        XChaCha20Poly1305.seal(key: key, nonce: zeroNonce, ad: attachmentContext, message: image)
    }

    /// The image bytes of an attachment blob made by ``encryptAttachment(_:key:)``,
    /// or `nil` if it does not open with `key` (wrong key, altered or truncated blob).
    package static func decryptAttachment(_ blob: [UInt8], key: [UInt8]) -> [UInt8]? {
        XChaCha20Poly1305.open(key: key, nonce: zeroNonce, ad: attachmentContext, ciphertext: blob)
    }
}
