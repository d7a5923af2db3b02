import ChorusCrypto
import ChorusEvents

/// Why the node refused a mutation before signing anything: the cases an
/// app branches on (`catch NodeError.refused(.insufficientRights(let held, let needed))`).
/// Each has a sentence for people (`description`).
public enum Refusal: Error, Sendable, Hashable, CustomStringConvertible {
    /// `addDevice`: the proof is not the device's signature consenting to this user: `no_device_consent`.
    case invalidDeviceProof(device: DeviceID, user: UserID)
    /// `setProfile` of a retired field (Specs/projections.md §6.2): `retired_field`.
    case retiredProfileField(String)
    /// A birthday without a year, a month and a day: `incomplete_date`.
    case incompleteDate
    /// `addPicture` of no bytes: `empty_picture`.
    case emptyPicture
    /// An image over the size limit: `picture_too_large`.
    case pictureTooLarge(bytes: Int, limit: Int)
    /// The bytes are none of the image formats pictures may hold: `not_an_image`.
    case notAnImage
    /// A change to a picture another user owns: `not_owner`.
    case pictureNotYours(picture: PictureID, owner: UserID)
    /// A change to a deleted picture: `after_deletion`.
    case pictureDeleted(PictureID)
    /// A picture this node does not hold: `picture_unknown`.
    case unknownPicture(PictureID)
    /// The picture's bytes are not held (not received yet, or purged): `picture_bytes_unavailable`.
    case pictureBytesUnavailable(PictureID)
    /// A placement relative to a picture that is not in the gallery: `picture_not_in_gallery`.
    case pictureNotInGallery(PictureID)
    /// `movePicture` between two pictures whose positions leave no room: `no_room_between_pictures`.
    case noRoomBetweenPictures
    /// A follow of this node's own user: `self`.
    case cannotFollowYourself
    /// A block of this node's own user: `self`.
    case cannotBlockYourself
    /// `unfollow`, `unlike`, `unblock` with nothing of yours to withdraw: `nothing_to_remove`.
    case nothingToRemove(what: String, target: Bytes32)
    /// A message needs text, a picture or both: `empty_message`.
    case emptyMessage
    /// A chat this node does not hold: `chat_unknown`.
    case unknownChat(ChatID)
    /// A message this node does not hold: `message_unknown`.
    case unknownMessage(MessageID)
    /// An edit or deletion of another sender's message: `not_author`.
    case notYourMessage(message: MessageID, sender: UserID)
    /// A message named with a chat it is not in: `wrong_chat`.
    case messageNotInChat(message: MessageID, chat: ChatID)
    /// A gift to a user none of whose devices this node knows: `no_known_device`.
    case noKnownDevice(user: UserID)
    /// A debit beyond this device's spending rights (Specs/projections.md §6.9): `beyond_rights`.
    case insufficientRights(held: UInt64, needed: UInt64)
    /// A slot number outside the network's slots (`lowest...highest`): `no_such_slot`.
    case noSuchSlot(slot: Int, lowest: Int, highest: Int)
    /// A member device's published encryption key is unusable, so the chat
    /// key cannot be wrapped to it: `unusable_member_key`.
    case unusableMemberKey
    /// Reading a chat this node cannot show (not held, or not readable here): `chat_unreadable`.
    case chatUnreadable(String)
    /// `setRelays`: the list breaks a rule of Specs/events.md §6.2.29 (the reason says which): `invalid_relay_list`.
    case invalidRelayList(String)
    /// `follow`, `like` or `block` of a target this user already follows, likes or blocks:
    /// a second add would take no effect (Specs/projections.md §6.4): `already_added`.
    case alreadyAdded(what: String, target: Bytes32)
    /// A message's text outside 1…4000 UTF-8 bytes: sealed, no member could open it (Specs/encryption.md §7): `text_length`.
    case textLength(bytes: Int)
    /// A chat title over 200 UTF-8 bytes: sealed, no member could open it (Specs/encryption.md §7): `title_length`.
    case titleLength(bytes: Int)

    /// A sentence for people saying why the mutation was refused and, where it
    /// helps, what to do instead.
    public var description: String {
        switch self {
        case .invalidDeviceProof(let device, let user): "the proof is not \(device.short)'s signature consenting to user \(user.short)"
        case .retiredProfileField(let field): "the profile field \(field) is retired: every profile field is public to the network"
        case .incompleteDate: "a birthday needs a year, a month and a day"
        case .emptyPicture: "the picture file is empty"
        case .pictureTooLarge(let bytes, let limit):
            "the picture is \(bytes) bytes; a picture may be at most \(limit) bytes: shrink or recompress it"
        case .notAnImage: "not a JPEG, PNG, GIF, WebP, HEIC or AVIF image"
        case .pictureNotYours(let picture, let owner): "picture \(picture.short) belongs to \(owner.short)"
        case .pictureDeleted(let picture): "picture \(picture.short) was deleted; its bytes are purged"
        case .unknownPicture(let picture): "this node holds no picture \(picture.short)"
        case .pictureBytesUnavailable(let picture):
            "this node does not hold the bytes of picture \(picture.short) (not received yet, or purged)"
        case .pictureNotInGallery(let picture): "picture \(picture.short) is not in your gallery"
        case .noRoomBetweenPictures: "no room between those pictures' positions; move one of them first"
        case .cannotFollowYourself: "you cannot follow yourself"
        case .cannotBlockYourself: "you cannot block yourself"
        case .nothingToRemove(let what, let target): "there is no \(what) of \(target.short) by you to remove"
        case .emptyMessage: "a message needs text, a picture or both"
        case .unknownChat(let chat): "this node holds no chat \(chat.short)"
        case .unknownMessage(let message): "this node holds no message \(message.short)"
        case .notYourMessage(let message, let sender): "message \(message.short) was sent by \(sender.short)"
        case .messageNotInChat(let message, let chat): "message \(message.short) is not a message of chat \(chat.short) here"
        case .noKnownDevice(let user):
            "this node knows no device of user \(user.short); sync or import the user's events first, or name the device"
        case .insufficientRights(let held, let needed): "this device holds rights to \(held) coins; \(needed) are needed"
        case .noSuchSlot(let slot, let lowest, let highest):
            lowest == 1
                ? "slot \(slot) does not exist: slots are numbered 1...\(highest) (slot 0 is always unlocked)"
                : "slot \(slot) does not exist: slots are numbered \(lowest)...\(highest)"
        case .unusableMemberKey: "a member device published an unusable encryption key"
        case .chatUnreadable(let why): why
        case .invalidRelayList(let why): "the relay list is not valid: \(why)"
        case .alreadyAdded(let what, let target): "there is already a \(what) of \(target.short) by you; a second would change nothing"
        case .textLength(let n):
            n == 0
                ? "a message's text cannot be empty: leave the text out to send only a picture"
                : "a message's text is at most \(PayloadLimits.messageTextBytes) bytes of UTF-8, this one has \(n): split it"
        case .titleLength(let n): "a chat title is at most \(PayloadLimits.chatTitleBytes) bytes of UTF-8, this one has \(n)"
        }
    }
}

extension Refusal {
    /// A stable, machine-readable name of the reason, in snake case. Where
    /// the projections decide the same thing about a stored event, it is the
    /// code they record (Specs/projections.md §4): a spend beyond one's
    /// rights is `beyond_rights` whether the node refuses it or a replica
    /// folds it.
    public var code: String {
        switch self {
        case .invalidDeviceProof: "no_device_consent"
        case .retiredProfileField: "retired_field"
        case .incompleteDate: "incomplete_date"
        case .emptyPicture: "empty_picture"
        case .pictureTooLarge: "picture_too_large"
        case .notAnImage: "not_an_image"
        case .pictureNotYours: "not_owner"
        case .pictureDeleted: "after_deletion"
        case .unknownPicture: "picture_unknown"
        case .pictureBytesUnavailable: "picture_bytes_unavailable"
        case .pictureNotInGallery: "picture_not_in_gallery"
        case .noRoomBetweenPictures: "no_room_between_pictures"
        case .cannotFollowYourself, .cannotBlockYourself: "self"
        case .nothingToRemove: "nothing_to_remove"
        case .emptyMessage: "empty_message"
        case .unknownChat: "chat_unknown"
        case .unknownMessage: "message_unknown"
        case .notYourMessage: "not_author"
        case .messageNotInChat: "wrong_chat"
        case .noKnownDevice: "no_known_device"
        case .insufficientRights: "beyond_rights"
        case .noSuchSlot: "no_such_slot"
        case .unusableMemberKey: "unusable_member_key"
        case .chatUnreadable: "chat_unreadable"
        case .invalidRelayList: "invalid_relay_list"
        case .alreadyAdded: "already_added"
        case .textLength: "text_length"
        case .titleLength: "title_length"
        }
    }
}
