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
    /// The user the page starts after (key order); nil: from the first.
    public let after: Bytes32?
    /// At most this many users; nil: all of them.
    public let limit: Int?

    /// The `relation` list of `subject` (default: this node's user): all
    /// of it, or a page of `limit` users after `after`.
    public init(_ relation: Relation, of subject: Bytes32?, after: Bytes32? = nil, limit: Int? = nil) {
        self.relation = relation
        self.subject = subject
        self.after = after
        self.limit = limit
    }

    /// Reads the list, or the page: its cost follows the page.
    public func run(on node: Node) async throws -> KeyList {
        let subject = self.subject ?? node.identity.user.raw
        let p = node.projections
        if limit == nil, after == nil {
            return switch relation {
            case .followers: KeyList(try p.followers(of: subject))
            case .following: KeyList(try p.following(of: subject))
            case .likes: KeyList(try p.likes(of: subject))
            }
        }
        let limit = try pageLimit(limit)
        let after = self.after.map(UserID.init)
        let page = try onePage(limit: limit, read: { n -> [UserID] in
            switch relation {
            case .followers: try p.followers(of: UserID(subject), after: after, limit: n)
            case .following: try p.following(of: UserID(subject), after: after, limit: n)
            case .likes: try p.likes(of: subject, after: after, limit: n)
            }
        }, next: \.hex)
        return KeyList(page.items.map(\.raw), nextPage: page.next)
    }
}

/// One picture: live, deleted, or not held here (Specs/api.md §5).
/// `GET /v1/pictures/{id}`; `chorus query picture`. Over HTTP a picture
/// this node does not hold answers 404 `picture_unknown`.
public struct GetPicture: NodeOperation {
    /// `{"status": "live", "picture": PICTURE, "likes": N}`, `{"status":
    /// "deleted", "id", "owner", "deleted", "deleted_time", "deleted_by"}` or `{"status": "unknown", "id"}`.
    public struct Result: OperationResult {
        /// What this node holds of the picture.
        public let lookup: PictureLookup
        /// Its likes, when live.
        public let likes: Int

        enum Keys: String, CodingKey {
            case status, picture, likes, id, owner, deleted
            case deletedTime = "deleted_time", deletedBy = "deleted_by"
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
                try c.encode(at.description, forKey: .deletedTime)
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
        // One snapshot: a like committed between the two reads must not count for a picture read before it.
        try node.read {
            let lookup = try node.picture(id)
            let likes = if case .live(let p) = lookup { try node.likes(of: p.id).count } else { 0 }
            return Result(lookup: lookup, likes: likes)
        }
    }
}

/// This node's user and device. `GET /v1/whoami`; `chorus whoami`.
public struct GetIdentity: NodeOperation {
    /// `{"user", "device"}`.
    public struct Result: OperationResult {
        /// The user key in hex.
        public let user: String
        /// This device's key in hex.
        public let device: String
    }

    /// The identity of the node it runs on.
    public init() {}

    /// Reads the node's identity.
    public func run(on node: Node) async throws -> Result {
        Result(user: node.identity.user.hex, device: node.identity.device.hex)
    }
}

/// A user's coin balance, by device (Specs/projections.md §6.9).
/// `GET /v1/balance`; `chorus query balance`.
public struct GetBalance: NodeOperation {
    /// `{"user", "total", "devices": [DEVICE, …], "user_key_rights"}`.
    public struct Result: OperationResult {
        /// The balance as the projections hold it.
        public let balance: BalanceView

        enum Keys: String, CodingKey {
            case user, total, devices
            case userKeyRights = "user_key_rights"
        }

        /// The balance's fields in the documented order.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(balance.user.hex, forKey: .user)
            try c.encode(balance.total, forKey: .total)
            try c.encode(balance.devices.map(DeviceShape.init), forKey: .devices)
            try c.encode(balance.userKeyRights, forKey: .userKeyRights)
        }
    }

    /// The user, or nil for this node's user.
    public let user: UserID?

    /// The balance of `user` (default: this node's user).
    public init(user: UserID? = nil) { self.user = user }

    /// Reads the balance.
    public func run(on node: Node) async throws -> Result {
        Result(balance: try node.projections.balance(of: user ?? node.identity.user))
    }
}

/// A user's lock slots: price, state, picture. `GET /v1/slots`; `chorus query slots`.
public struct GetSlots: NodeOperation {
    /// `[{"slot", "price", "unlocked", "picture": REFERENCE|null}, …]`.
    public struct Result: OperationResult {
        /// The slots as the projections hold them.
        public let slots: [SlotView]

        struct Slot: Encodable {
            let slot: Int
            let price: UInt64
            let unlocked: Bool
            let picture: ReferenceShape?
        }

        /// An array of slots.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for s in slots { try c.encode(Slot(slot: s.slot, price: s.price, unlocked: s.unlocked, picture: s.picture.map(ReferenceShape.init))) }
        }
    }

    /// The user, or nil for this node's user.
    public let user: UserID?

    /// The slots of `user` (default: this node's user).
    public init(user: UserID? = nil) { self.user = user }

    /// Reads the slots.
    public func run(on node: Node) async throws -> Result {
        Result(slots: try node.projections.slots(of: user ?? node.identity.user))
    }
}

/// The projection digest, equal on two nodes exactly when their projected
/// state is, and the events held. `GET /v1/digest`; `chorus query digest`.
public struct GetDigest: NodeOperation {
    /// `{"digest", "events"}`.
    public struct Result: OperationResult {
        /// The digest in hex.
        public let digest: String
        /// The last arrival position.
        public let events: UInt64
    }

    /// The digest of the node it runs on.
    public init() {}

    /// Reads the digest.
    public func run(on node: Node) async throws -> Result {
        Result(digest: try node.projections.digest().hex, events: try node.lastArrival())
    }
}

/// Pictures: a user's gallery in its order, or the feed of the users this
/// user follows, newest first. `GET /v1/pictures`, `GET /v1/feed`;
/// `chorus query pictures|feed`.
public struct ListPictures: NodeOperation {
    /// Which pictures.
    public enum Source: Sendable {
        /// The gallery of a user (nil: this node's user), skipping `offset`.
        case gallery(UserID?, offset: Int)
        /// The feed, older than `before` when given.
        case feed(before: HLC?)
    }

    /// `[PICTURE, …]`.
    public struct Result: OperationResult {
        /// The pictures.
        public let pictures: [PictureView]

        /// An array of pictures.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for p in pictures { try c.encode(PictureShape(p)) }
        }
    }

    /// Which pictures.
    public let source: Source
    /// At most this many.
    public let limit: Int

    /// At most `limit` pictures of `source`.
    public init(_ source: Source, limit: Int) {
        self.source = source
        self.limit = limit
    }

    /// Reads the pictures.
    public func run(on node: Node) async throws -> Result {
        guard limit >= 0 else { throw OperationError(.badInput, code: "bad_limit", "limit must not be negative") }
        switch source {
        case .gallery(let user, let offset):
            guard offset >= 0 else { throw OperationError(.badInput, code: "bad_offset", "offset must not be negative") }
            return Result(pictures: try node.projections.pictures(of: user ?? node.identity.user, limit: limit, offset: offset))
        case .feed(let before):
            return Result(pictures: try node.projections.feed(for: node.identity.user, limit: limit, before: before))
        }
    }
}

/// Stored events that took no effect, with the rule that stopped them
/// (Specs/projections.md §4). `GET /v1/no-effect`; `chorus query no-effect`.
public struct ListNoEffect: NodeOperation {
    /// `[{"event", "kind", "code", "reason"}, …]`.
    public struct Result: OperationResult {
        /// One event without effect.
        public struct Entry: Encodable, Sendable {
            /// The event id in hex.
            public let event: String
            /// Its kind's name (`?` when the event is not held).
            public let kind: String
            /// The rule's stable code.
            public let code: String
            /// A sentence for people.
            public let reason: String
        }

        /// The events.
        public let entries: [Entry]

        /// An array of entries.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for e in entries { try c.encode(e) }
        }
    }

    /// At most this many.
    public let limit: Int

    /// At most `limit` events.
    public init(limit: Int = 100) { self.limit = limit }

    /// Reads the records and the kinds of their events.
    public func run(on node: Node) async throws -> Result {
        guard limit >= 0 else { throw OperationError(.badInput, code: "bad_limit", "limit must not be negative") }
        let records = try node.projections.noEffects(limit: limit)
        return Result(
            entries: try records.map { r in
                Result.Entry(event: r.event.hex, kind: try node.event(r.event)?.event.kind.name ?? "?", code: r.reason.code, reason: r.reason.detail)
            })
    }
}

extension GetProfile.Result {
    /// Field values are as the profile holds them (text, or null once cleared).
    public static var schema: JSONSchema {
        .object([("user", .hex32), ("fields", .map(.anyValue)), ("avatar", .nullable(.ref("Reference"))), ("devices", .array(.ref("Device")))])
    }
}

extension GetPicture.Result {
    /// One object per status; `unknown` comes with a 404 over HTTP.
    public static var schema: JSONSchema {
        .anyOf([
            .object([("status", .constant("live")), ("picture", .ref("Picture")), ("likes", .integer)]),
            .object([
                ("status", .constant("deleted")), ("id", .hex32), ("owner", .hex32), ("deleted", .integer), ("deleted_time", .string),
                ("deleted_by", .hex32),
            ]),
            .object([("status", .constant("unknown")), ("id", .hex32)]),
        ])
    }
}

extension GetIdentity.Result {
    /// `{"user", "device"}`.
    public static var schema: JSONSchema { .object([("user", .hex32), ("device", .hex32)]) }
}

extension GetBalance.Result {
    /// `{"user", "total", "devices", "user_key_rights"}`.
    public static var schema: JSONSchema {
        .object([("user", .hex32), ("total", .integer), ("devices", .array(.ref("Device"))), ("user_key_rights", .integer)])
    }
}

extension GetSlots.Result {
    /// `[{"slot", "price", "unlocked", "picture"}, …]`.
    public static var schema: JSONSchema {
        .array(.object([("slot", .integer), ("price", .integer), ("unlocked", .boolean), ("picture", .nullable(.ref("Reference")))]))
    }
}

extension GetDigest.Result {
    /// `{"digest", "events"}`.
    public static var schema: JSONSchema { .object([("digest", .hex32), ("events", .integer)]) }
}

extension ListPictures.Result {
    /// `[PICTURE, …]`.
    public static var schema: JSONSchema { .array(.ref("Picture")) }
}

extension ListNoEffect.Result {
    /// `[{"event", "kind", "code", "reason"}, …]`.
    public static var schema: JSONSchema { .array(.object([("event", .hex32), ("kind", .string), ("code", .string), ("reason", .string)])) }
}
