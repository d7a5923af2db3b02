/// Every event kind of format version 1, with its wire code (Specs/events.md §6).
/// A code this node does not know is `.unknown(code)`: such an event (from a
/// newer node) is stored, verified, relayed and not folded (Specs/events.md
/// §6.3), so adding a kind never splits the network. Every `switch` over
/// kinds must say what it does with `.unknown`: the compiler checks it.
package enum EventKind: Sendable, Hashable {
    /// `device.added` (1): a user key binds the device named by `object` to itself.
    case deviceAdded
    /// `device.removed` (2): a user key unbinds the device named by `object`.
    case deviceRemoved
    /// `device.key` (3): a device publishes its X25519 encryption key (Specs/encryption.md §3).
    case deviceKey

    /// `profile.set` (10): sets or clears one field of the profile of the user named by `object`.
    case profileSet

    /// `picture.created` (20, purgeable): creates the picture named by `object`.
    case pictureCreated
    /// `picture.captioned` (21, purgeable): replaces a picture's caption.
    case pictureCaptioned
    /// `picture.moved` (22): moves a picture to a new place in its owner's gallery.
    case pictureMoved
    /// `picture.deleted` (23): deletes a picture for good, purging its payloads and blob.
    case pictureDeleted

    /// `follow.added` (30): follows the user named by `object`.
    case followAdded
    /// `follow.removed` (31): cancels the `follow.added` events it names.
    case followRemoved
    /// `like.added` (32): likes the picture or message named by `object`.
    case likeAdded
    /// `like.removed` (33): cancels the `like.added` events it names.
    case likeRemoved
    /// `block.added` (34): blocks the user named by `object`.
    case blockAdded
    /// `block.removed` (35): cancels the `block.added` events it names.
    case blockRemoved

    /// `chat.created` (40): creates the chat named by `object`, with its creator as admin.
    case chatCreated
    /// `chat.member.added` (41): an admin adds a chat member or sets a member's admin flag.
    case chatMemberAdded
    /// `chat.member.removed` (42): an admin removes a member from a chat, or a member leaves.
    case chatMemberRemoved
    /// `message.sent` (43, purgeable): a sealed message in a chat; its event id is the message id.
    case messageSent
    /// `message.edited` (44, purgeable): replaces the sealed text of the message named by `object`.
    case messageEdited
    /// `message.deleted` (45): deletes the message named by `object`, purging its payloads.
    case messageDeleted
    /// `chat.read` (46): moves the author's read marker in a chat forward to a message.
    case chatRead
    /// `chat.key` (47): wraps a chat epoch key to member devices (Specs/encryption.md §5).
    case chatKey

    /// `coin.credited` (50): an issuer credits bought coins to the device named by `object`.
    case coinCredited
    /// `coin.spent` (51): a device spends coins of its user's account.
    case coinSpent
    /// `coin.given` (52): a device gives coins to the user named by `object`.
    case coinGiven
    /// `coin.rights.moved` (53): moves spending rights to a sibling device of the same user.
    case coinRightsMoved
    /// `slot.unlocked` (54): pays to unlock a lock slot of the user named by `object`.
    case slotUnlocked
    /// `slot.set` (55): puts a picture in a lock slot of the user's profile, or empties it.
    case slotSet

    /// `relays.set` (60): replaces the list of relays of the user named by
    /// `object`: where the user's feeds live and where others leave what is
    /// addressed to the user (Specs/events.md §6.2.29).
    case relaysSet

    /// A code not in this node's table.
    case unknown(UInt64)

    /// Every kind this node knows, in code order.
    package static let known: [EventKind] = [
        .deviceAdded, .deviceRemoved, .deviceKey, .profileSet, .pictureCreated, .pictureCaptioned, .pictureMoved, .pictureDeleted,
        .followAdded, .followRemoved, .likeAdded, .likeRemoved, .blockAdded, .blockRemoved, .chatCreated, .chatMemberAdded,
        .chatMemberRemoved, .messageSent, .messageEdited, .messageDeleted, .chatRead, .chatKey, .coinCredited, .coinSpent, .coinGiven,
        .coinRightsMoved, .slotUnlocked, .slotSet, .relaysSet,
    ]

    /// The wire code (header key 5).
    package var code: UInt64 {
        switch self {
        case .deviceAdded: 1
        case .deviceRemoved: 2
        case .deviceKey: 3
        case .profileSet: 10
        case .pictureCreated: 20
        case .pictureCaptioned: 21
        case .pictureMoved: 22
        case .pictureDeleted: 23
        case .followAdded: 30
        case .followRemoved: 31
        case .likeAdded: 32
        case .likeRemoved: 33
        case .blockAdded: 34
        case .blockRemoved: 35
        case .chatCreated: 40
        case .chatMemberAdded: 41
        case .chatMemberRemoved: 42
        case .messageSent: 43
        case .messageEdited: 44
        case .messageDeleted: 45
        case .chatRead: 46
        case .chatKey: 47
        case .coinCredited: 50
        case .coinSpent: 51
        case .coinGiven: 52
        case .coinRightsMoved: 53
        case .slotUnlocked: 54
        case .slotSet: 55
        case .relaysSet: 60
        case .unknown(let code): code
        }
    }

    private static let byCode: [UInt64: EventKind] = Dictionary(uniqueKeysWithValues: known.map { ($0.code, $0) })

    /// The kind with this wire code: a known kind, or `.unknown(code)`.
    package init(code: UInt64) { self = Self.byCode[code] ?? .unknown(code) }

    /// Only a kind this node knows (stored projection records hold known kinds).
    package init?(knownCode code: UInt64) {
        guard let kind = Self.byCode[code] else { return nil }
        self = kind
    }

    /// Whether this node knows the kind (false exactly for `.unknown`): only known kinds
    /// have a schema, are folded and may be signed (Specs/events.md §6.3).
    package var isKnown: Bool { if case .unknown = self { false } else { true } }

    /// The dotted name used by the CLI, JSON output and Specs.
    package var name: String {
        switch self {
        case .deviceAdded: "device.added"
        case .deviceRemoved: "device.removed"
        case .deviceKey: "device.key"
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
        case .chatKey: "chat.key"
        case .coinCredited: "coin.credited"
        case .coinSpent: "coin.spent"
        case .coinGiven: "coin.given"
        case .coinRightsMoved: "coin.rights.moved"
        case .slotUnlocked: "slot.unlocked"
        case .slotSet: "slot.set"
        case .relaysSet: "relays.set"
        case .unknown(let code): "unknown.\(code)"
        }
    }

    /// A known kind by its dotted name.
    package init?(name: String) {
        guard let kind = EventKind.known.first(where: { $0.name == name }) else { return nil }
        self = kind
    }

    /// Kinds whose payload may be absent (purged after a deletion). Every
    /// other known kind must always travel with its payload. An unknown
    /// kind may be purgeable on the newer node that wrote it, so its
    /// payload may be absent too (Specs/events.md §6.3).
    package var payloadIsPurgeable: Bool {
        switch self {
        case .pictureCreated, .pictureCaptioned, .messageSent, .messageEdited, .unknown: true
        // Listed, not `default`, so a new kind must say (Specs/adding-a-kind.md).
        case .deviceAdded, .deviceRemoved, .deviceKey, .profileSet, .pictureMoved, .pictureDeleted, .followAdded, .followRemoved,
            .likeAdded, .likeRemoved, .blockAdded, .blockRemoved, .chatCreated, .chatMemberAdded, .chatMemberRemoved, .messageDeleted,
            .chatRead, .chatKey, .coinCredited, .coinSpent, .coinGiven, .coinRightsMoved, .slotUnlocked, .slotSet, .relaysSet:
            false
        }
    }
}

/// What a kind means to the layers that route, host and encrypt, declared
/// here for every kind beside its code and name, so that a new kind states
/// them in one place (Specs/adding-a-kind.md step 5) and each layer reads
/// the role, not a list of kinds. Each is an exhaustive `switch`: a kind
/// left out does not compile.
extension EventKind {
    /// Whom an event is addressed to besides its author (Specs/sync.md
    /// §4.11): the users whose inbox relays it is left at.
    package enum Addressing: Sendable, Hashable {
        /// Nobody.
        case none
        /// The user named by `object` (a follow, a gift).
        case objectUser
        /// The users the payload's `members` names (an invitation).
        case payloadMembers
        /// The user the payload's `user` names (a member added).
        case payloadUser
        /// The users of the devices the payload's `wraps` are for (a chat key).
        case wrappedDevices
    }

    /// How a kind's events are addressed (Specs/sync.md §4.11).
    package var addressing: Addressing {
        switch self {
        case .followAdded, .followRemoved, .coinGiven: .objectUser
        case .chatCreated: .payloadMembers
        case .chatMemberAdded: .payloadUser
        case .chatKey: .wrappedDevices
        case .deviceAdded, .deviceRemoved, .deviceKey, .profileSet, .pictureCreated, .pictureCaptioned, .pictureMoved, .pictureDeleted,
            .likeAdded, .likeRemoved, .blockAdded, .blockRemoved, .chatMemberRemoved, .messageSent, .messageEdited,
            .messageDeleted, .chatRead, .coinCredited, .coinSpent, .coinRightsMoved, .slotUnlocked, .slotSet, .relaysSet, .unknown:
            .none
        }
    }

    /// Whether a user key signs it into its directory feed, the feed every
    /// listed relay keeps for every user (Specs/sync.md §8.1): bindings
    /// and the relay list.
    package var isDirectoryKind: Bool {
        switch self {
        case .deviceAdded, .deviceRemoved, .relaysSet:
            true
        case .deviceKey, .profileSet, .pictureCreated, .pictureCaptioned, .pictureMoved, .pictureDeleted, .followAdded, .followRemoved,
            .likeAdded, .likeRemoved, .blockAdded, .blockRemoved, .chatCreated, .chatMemberAdded, .chatMemberRemoved, .messageSent,
            .messageEdited, .messageDeleted, .chatRead, .chatKey, .coinCredited, .coinSpent, .coinGiven, .coinRightsMoved, .slotUnlocked,
            .slotSet, .unknown:
            false
        }
    }

    /// What an event's arrival can change in who is entitled to a chat's
    /// keys (Specs/encryption.md §6 rule 5).
    package enum ChatKeyRole: Sendable, Hashable {
        /// Nothing.
        case none
        /// The membership or keys of the chat named by `object`.
        case chatAccess
        /// The epochs a message of the chat named by `object` was sealed in.
        case message
        /// A binding: the user key that signs it and the device named by `object`.
        case binding
        /// The author device's encryption key.
        case deviceKey
    }

    /// How a kind's arrival bears on chat keys (Specs/encryption.md §6 rule 5).
    package var chatKeyRole: ChatKeyRole {
        switch self {
        case .chatCreated, .chatMemberAdded, .chatMemberRemoved, .chatKey: .chatAccess
        case .messageSent: .message
        case .deviceAdded, .deviceRemoved: .binding
        case .deviceKey: .deviceKey
        case .profileSet, .pictureCreated, .pictureCaptioned, .pictureMoved, .pictureDeleted, .followAdded, .followRemoved, .likeAdded,
            .likeRemoved, .blockAdded, .blockRemoved, .messageEdited, .messageDeleted, .chatRead, .coinCredited, .coinSpent, .coinGiven,
            .coinRightsMoved, .slotUnlocked, .slotSet, .relaysSet, .unknown:
            .none
        }
    }

    /// What an event replaces of earlier ones (Specs/projections.md §2, §6):
    /// what `chorus-replay history` names as superseded.
    package enum Supersession: Sendable, Hashable {
        /// Nothing.
        case none
        /// It writes the named last-writer-wins register of its object (per
        /// field or slot where the payload is `RegisterKeyed`), replacing
        /// the register's previous write.
        case register(String)
        /// It deletes its object, replacing every edit of it.
        case deletion
        /// It removes the adds its `RemovalPayload` names from an add-wins set.
        case removal
    }

    /// What a kind's events replace (Specs/projections.md §2, §6).
    package var supersession: Supersession {
        switch self {
        case .profileSet: .register("profile")
        case .pictureCaptioned, .pictureCreated: .register("caption")
        case .pictureMoved: .register("position")
        case .messageEdited, .messageSent: .register("text")
        case .slotSet: .register("slot")
        case .relaysSet: .register("relays")
        case .pictureDeleted, .messageDeleted: .deletion
        case .followRemoved, .likeRemoved, .blockRemoved: .removal
        case .deviceAdded, .deviceRemoved, .deviceKey, .followAdded, .likeAdded, .blockAdded, .chatCreated, .chatMemberAdded,
            .chatMemberRemoved, .chatRead, .chatKey, .coinCredited, .coinSpent, .coinGiven, .coinRightsMoved, .slotUnlocked, .unknown:
            .none
        }
    }
}

/// A payload whose kind writes one register per part of its object (a
/// profile's field, a slot): the part it writes.
package protocol RegisterKeyed: KindPayload {
    /// The part of the object whose register this payload writes.
    var registerPart: String { get }
}

extension ProfileSetPayload: RegisterKeyed {
    /// The field.
    package var registerPart: String { field.rawValue }
}

extension SlotSetPayload: RegisterKeyed {
    /// The slot number.
    package var registerPart: String { "\(slot)" }
}
