/// Every event kind of format version 1, with its wire code (Specs/events.md §6).
/// A decoder refuses any code not listed here.
public enum EventKind: UInt64, CaseIterable, Sendable, Hashable {
    case deviceAdded = 1
    case deviceRemoved = 2

    case profileSet = 10

    case pictureCreated = 20
    case pictureCaptioned = 21
    case pictureMoved = 22
    case pictureDeleted = 23

    case followAdded = 30
    case followRemoved = 31
    case likeAdded = 32
    case likeRemoved = 33
    case blockAdded = 34
    case blockRemoved = 35

    case chatCreated = 40
    case chatMemberAdded = 41
    case chatMemberRemoved = 42
    case messageSent = 43
    case messageEdited = 44
    case messageDeleted = 45
    case chatRead = 46

    case coinCredited = 50
    case coinSpent = 51
    case coinGiven = 52
    case coinRightsMoved = 53
    case slotUnlocked = 54
    case slotSet = 55

    /// The dotted name used by the CLI, JSON output and Specs.
    public var name: String {
        switch self {
        case .deviceAdded: "device.added"
        case .deviceRemoved: "device.removed"
        case .profileSet: "profile.set"
        case .pictureCreated: "picture.created"
        case .pictureCaptioned: "picture.captioned"
        case .pictureMoved: "picture.moved"
        case .pictureDeleted: "picture.deleted"
        case .followAdded: "follow.added"
        case .followRemoved: "follow.removed"
        case .likeAdded: "like.added"
        case .likeRemoved: "like.removed"
        case .blockAdded: "block.added"
        case .blockRemoved: "block.removed"
        case .chatCreated: "chat.created"
        case .chatMemberAdded: "chat.member.added"
        case .chatMemberRemoved: "chat.member.removed"
        case .messageSent: "message.sent"
        case .messageEdited: "message.edited"
        case .messageDeleted: "message.deleted"
        case .chatRead: "chat.read"
        case .coinCredited: "coin.credited"
        case .coinSpent: "coin.spent"
        case .coinGiven: "coin.given"
        case .coinRightsMoved: "coin.rights.moved"
        case .slotUnlocked: "slot.unlocked"
        case .slotSet: "slot.set"
        }
    }

    public init?(name: String) {
        guard let kind = EventKind.allCases.first(where: { $0.name == name }) else { return nil }
        self = kind
    }

    /// Kinds whose payload may be absent (purged after a deletion). Every
    /// other kind must always travel with its payload.
    public var payloadIsPurgeable: Bool {
        switch self {
        case .pictureCreated, .pictureCaptioned, .messageSent, .messageEdited: true
        default: false
        }
    }
}
