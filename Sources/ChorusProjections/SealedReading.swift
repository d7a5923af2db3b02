import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents

/// A device's view of the chat keys wrapped to it (Specs/encryption.md §5):
/// finds the effective wrap of an epoch for the device in the projections,
/// unwraps it with the device's X25519 secret and checks it against the
/// epoch id. Shared by the node and the replay tool.
package struct EpochKeyFinder: Sendable {
    /// The device whose wraps are looked for (its Ed25519 public key).
    package let device: PublicKey
    /// The device's X25519 key pair, which opens the wraps addressed to it.
    package let agreement: AgreementKey

    /// A finder that looks up `device`'s wraps and opens them with `agreement`,
    /// the device's X25519 key pair.
    package init(device: PublicKey, agreement: AgreementKey) {
        self.device = device
        self.agreement = agreement
    }

    /// The key of `epoch` in `chat`, or nil when no wrap for this device
    /// took effect or it does not open.
    package func key(chat: ObjectID, epoch: Hash32, in projections: Projections) throws -> [UInt8]? {
        if let eventID = try projections.wrap(of: chat, epoch: epoch, for: device),
            let payload = try projections.log.event(eventID)?.event.payload,
            let key = try? ChatKeyPayload(reading: payload),
            let opened = ChatCrypto.unwrap(wraps: key.wraps, ephemeral: key.ephemeral, chat: chat, epoch: epoch, device: device, with: agreement)
        {
            return opened
        }
        // Reading may use any wrap addressed to this device, even one that
        // took no effect: a key that opens a message its author signed reads
        // that message (Specs/encryption.md §8). Only sealing is restricted.
        for key in try projections.keyEvents(of: chat, epoch: epoch) where key.devices.contains(device) {
            if let opened = ChatCrypto.unwrap(
                wraps: key.wraps, ephemeral: key.ephemeral, chat: chat, epoch: epoch, device: device, with: agreement)
            {
                return opened
            }
        }
        return nil
    }
}

/// Where an event carries a sealed value, and what binds it (§7).
package struct SealedField: Sendable {
    /// The sealed bytes: `epoch (32) || nonce (24) || ciphertext`
    /// (Specs/encryption.md §7).
    package let sealed: [UInt8]
    /// The chat bound into the associated data: the event's object for
    /// `chat.created` and `message.sent`, the payload's `chat` for
    /// `message.edited`.
    package let chat: ObjectID
    /// The carrying event's object, also bound into the associated data (the
    /// chat id, or the message id for an edit).
    package let object: ObjectID

    /// The sealed value of a `chat.created` title, `message.sent` body or
    /// `message.edited` body; nil for other kinds or a purged payload.
    package init?(of event: Event) {
        guard let payload = event.payload else { return nil }
        switch event.kind {
        case .chatCreated:
            guard let title = (try? ChatCreatedPayload(reading: payload))?.title else { return nil }
            (sealed, chat, object) = (title, event.object, event.object)
        case .messageSent:
            guard let sent = try? MessageSentPayload(reading: payload) else { return nil }
            (sealed, chat, object) = (sent.body, event.object, event.object)
        case .messageEdited:
            guard let edit = try? MessageEditedPayload(reading: payload) else { return nil }
            (sealed, chat, object) = (edit.body, edit.chat, event.object)
        default:
            return nil
        }
    }
}
