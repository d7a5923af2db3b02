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
