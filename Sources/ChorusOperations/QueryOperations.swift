import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections

/// A user's profile: fields, avatar and devices (Specs/api.md §5).
/// `GET /v1/profile`; `chorus query profile`.
public struct GetProfile: NodeOperation {
    /// `{"user", "fields": {NAME: VALUE, …}, "avatar": REFERENCE|null, "devices": [DEVICE, …]}`.
    public struct Result: OperationResult {
        /// The profile as the projections hold it.
        public let profile: ProfileView

        enum Keys: String, CodingKey { case user, fields, avatar, devices }

        /// Fields in the projections' order; the avatar, a reference, apart.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(profile.user.hex, forKey: .user)
            try c.encode(JSONValue.object(profile.fields.filter { $0.name != "avatar" }.map { ($0.name, JSONValue(cbor: $0.value)) }), forKey: .fields)
            try c.encodeIfPresent(profile.avatar.map(ReferenceShape.init), forKey: .avatar)
            try c.encode(profile.devices.map(DeviceShape.init), forKey: .devices)
        }
    }

    /// The user, or nil for this node's user.
    public let user: UserID?

    /// The profile of `user` (default: this node's user).
    public init(user: UserID? = nil) { self.user = user }

    /// Reads the profile.
    public func run(on node: Node) async throws -> Result {
        Result(profile: try node.projections.profile(user ?? node.identity.user))
    }
}

/// Users following a user (minus those the user blocked), users a user
/// follows, or users who like a picture or message. `GET /v1/followers`,
/// `/v1/following`, `/v1/likes/{object}`; `chorus query followers|following|likes`.
public struct ListRelated: NodeOperation {
    /// Which list.
    public enum Relation: Sendable {
        case followers, following, likes
    }

    /// The list.
    public let relation: Relation
    /// The user (followers, following) or the object (likes); nil: this node's user.
    public let subject: Bytes32?

    /// The `relation` list of `subject` (default: this node's user).
    public init(_ relation: Relation, of subject: Bytes32?) {
        self.relation = relation
        self.subject = subject
    }

    /// Reads the list.
    public func run(on node: Node) async throws -> KeyList {
        let subject = self.subject ?? node.identity.user.raw
        return switch relation {
        case .followers: KeyList(try node.projections.followers(of: subject))
        case .following: KeyList(try node.projections.following(subject))
        case .likes: KeyList(try node.projections.likes(of: subject))
        }
    }
}

/// One picture: live, deleted, or not held here (Specs/api.md §5).
/// `GET /v1/pictures/{id}`; `chorus query picture`. Over HTTP a picture
/// this node does not hold answers 404 `picture_unknown`.
public struct GetPicture: NodeOperation {
    /// `{"status": "live", "picture": PICTURE, "likes": N}`, `{"status":
    /// "deleted", "id", "owner", "deleted", "deleted_by"}` or `{"status": "unknown", "id"}`.
    public struct Result: OperationResult {
        /// What this node holds of the picture.
        public let lookup: PictureLookup
        /// Its likes, when live.
        public let likes: Int

        enum Keys: String, CodingKey {
            case status, picture, likes, id, owner, deleted
            case deletedBy = "deleted_by"
        }

        /// The shape of the lookup's case.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            switch lookup {
            case .live(let p):
                try c.encode("live", forKey: .status)
                try c.encode(PictureShape(p), forKey: .picture)
                try c.encode(UInt64(likes), forKey: .likes)
            case .deleted(let id, let owner, let at, let by):
                try c.encode("deleted", forKey: .status)
                try c.encode(id.hex, forKey: .id)
                try c.encode(owner.hex, forKey: .owner)
                try c.encode(at.rawValue, forKey: .deleted)
                try c.encode(by.hex, forKey: .deletedBy)
            case .unknown(let id):
                try c.encode("unknown", forKey: .status)
                try c.encode(id.hex, forKey: .id)
            }
        }

        /// A picture not held here is not found.
        public var failure: OperationError? {
            guard case .unknown(let id) = lookup else { return nil }
            return OperationError(.notFound, code: "picture_unknown", "this node holds no picture \(id.hex) (not received yet, or no such picture)")
        }
    }

    /// The picture.
    public let id: PictureID

    /// The picture `id`.
    public init(_ id: PictureID) { self.id = id }

    /// Reads the picture and, when live, counts its likes.
    public func run(on node: Node) async throws -> Result {
        let lookup = try node.projections.picture(id)
        let likes = if case .live(let p) = lookup { try node.projections.likes(of: p.id).count } else { 0 }
        return Result(lookup: lookup, likes: likes)
    }
}
