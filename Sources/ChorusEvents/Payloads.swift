import ChorusCBOR
import ChorusCrypto

/// One typed payload per known kind (Specs/events.md §6.2): its schema, its
/// builder (`cbor`) and its reader (`init(reading:)`) side by side.
/// `EventKind.payloadType` maps every known kind to its type through an
/// exhaustive switch, so a kind without one does not compile
/// (Specs/adding-a-kind.md).
package protocol KindPayload: Sendable {
    /// The kind whose payload this type is.
    static var kind: EventKind { get }
    /// The schema every payload of `kind` satisfies (Specs/events.md §6.2).
    static var schema: PayloadSchema { get }
    /// Reads a payload that conforms to `schema` (every stored payload does:
    /// it was checked before it was stored). Throws `schemaViolation` otherwise.
    init(reading payload: CBORValue) throws(EventError)
    /// The payload as deterministic CBOR input (the encoder sorts the keys).
    var cbor: CBORValue { get }
}

extension EventKind {
    /// The typed payload of a known kind; nil for a kind this version does not know.
    package var payloadType: (any KindPayload.Type)? {
        switch self {
        case .deviceAdded: DeviceAddedPayload.self
        case .deviceRemoved: DeviceRemovedPayload.self
        case .deviceKey: DeviceKeyPayload.self
        case .profileSet: ProfileSetPayload.self
        case .pictureCreated: PictureCreatedPayload.self
        case .pictureCaptioned: PictureCaptionedPayload.self
        case .pictureMoved: PictureMovedPayload.self
        case .pictureDeleted: PictureDeletedPayload.self
        case .followAdded: FollowAddedPayload.self
        case .followRemoved: FollowRemovedPayload.self
        case .likeAdded: LikeAddedPayload.self
        case .likeRemoved: LikeRemovedPayload.self
        case .blockAdded: BlockAddedPayload.self
        case .blockRemoved: BlockRemovedPayload.self
        case .chatCreated: ChatCreatedPayload.self
        case .chatMemberAdded: ChatMemberAddedPayload.self
        case .chatMemberRemoved: ChatMemberRemovedPayload.self
        case .messageSent: MessageSentPayload.self
        case .messageEdited: MessageEditedPayload.self
        case .messageDeleted: MessageDeletedPayload.self
        case .chatRead: ChatReadPayload.self
        case .chatKey: ChatKeyPayload.self
        case .coinCredited: CoinCreditedPayload.self
        case .coinSpent: CoinSpentPayload.self
        case .coinGiven: CoinGivenPayload.self
        case .coinRightsMoved: CoinRightsMovedPayload.self
        case .slotUnlocked: SlotUnlockedPayload.self
        case .slotSet: SlotSetPayload.self
        case .relaysSet: RelaysSetPayload.self
        case .unknown: nil
        }
    }
}

/// Field access for readers: each missing or mistyped field is a
/// `schemaViolation` naming the kind and the field.
struct FieldReader {
    let payload: CBORValue
    let kind: EventKind

    func fail(_ field: String, _ what: String) -> EventError { .schemaViolation(kind: kind.name, detail: "\(field) must be \(what)") }
    func value(_ f: String) throws(EventError) -> CBORValue {
        guard let v = payload[text: f] else { throw .schemaViolation(kind: kind.name, detail: "missing required field \"\(f)\"") }
        return v
    }
    func id(_ f: String) throws(EventError) -> Bytes32 {
        guard let b = try value(f).bytesValue, let id = Bytes32(b) else { throw fail(f, "32 bytes") }
        return id
    }
    func optionalID(_ f: String) throws(EventError) -> Bytes32? {
        guard let v = payload[text: f], !v.isNull else { return nil }
        guard let b = v.bytesValue, let id = Bytes32(b) else { throw fail(f, "32 bytes") }
        return id
    }
    func bytes(_ f: String) throws(EventError) -> [UInt8] {
        guard let b = try value(f).bytesValue else { throw fail(f, "a byte string") }
        return b
    }
    func optionalBytes(_ f: String) throws(EventError) -> [UInt8]? {
        guard let v = payload[text: f] else { return nil }
        guard let b = v.bytesValue else { throw fail(f, "a byte string") }
        return b
    }
    func text(_ f: String) throws(EventError) -> String {
        guard let s = try value(f).textValue else { throw fail(f, "text") }
        return s
    }
    func optionalText(_ f: String) throws(EventError) -> String? {
        guard let v = payload[text: f] else { return nil }
        guard let s = v.textValue else { throw fail(f, "text") }
        return s
    }
    func uint(_ f: String) throws(EventError) -> UInt64 {
        guard let n = try value(f).unsignedValue else { throw fail(f, "an unsigned integer") }
        return n
    }
    func optionalUInt(_ f: String) throws(EventError) -> UInt64? {
        guard let v = payload[text: f] else { return nil }
        guard let n = v.unsignedValue else { throw fail(f, "an unsigned integer") }
        return n
    }
    func ids(_ f: String) throws(EventError) -> [Bytes32] {
        guard let items = try value(f).arrayValue else { throw fail(f, "an array") }
        var out: [Bytes32] = []
        for item in items {
            guard let b = item.bytesValue, let id = Bytes32(b) else { throw fail(f, "an array of 32-byte ids") }
            out.append(id)
        }
        return out
    }
}

/// A payload map from its present fields (absent optionals are left out,
/// so each payload has one encoding).
func payloadMap(_ fields: [(String, CBORValue?)]) -> CBORValue {
    .textMap(fields.compactMap { name, value in value.map { (name, $0) } })
}

// MARK: Identity

/// The payload of `device.added` (Specs/events.md §6.2.1): a user key binds the device
/// named by the event's `object`.
package struct DeviceAddedPayload: KindPayload, Hashable {
    /// `device.added`, code 1.
    package static let kind = EventKind.deviceAdded
    /// Optional `name` (1...64 bytes) and optional 64-byte `proof`.
    package static let schema = PayloadSchema([
        optional("name", .text(minBytes: 1, maxBytes: 64)),
        // The device's consent (Specs/projections.md): without it no user
        // could claim someone else's device.
        optional("proof", .bytes(minCount: 64, maxCount: 64)),
    ])
    /// A human-readable device name, 1...64 bytes of UTF-8; nil when absent.
    package var name: String?
    /// The device's signature consenting to the user (`DeviceBinding.proof`).
    package var proof: [UInt8]?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(name: String? = nil, proof: [UInt8]? = nil) {
        self.name = name
        self.proof = proof
    }
    /// Reads a `device.added` payload; throws `schemaViolation` for a mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(name: try r.optionalText("name"), proof: try r.optionalBytes("proof"))
    }
    /// Encodes as `{name?, proof?}`, absent fields left out.
    package var cbor: CBORValue { payloadMap([("name", name.map { .text($0) }), ("proof", proof.map { .bytes($0) })]) }
}

/// The payload of `device.removed` (Specs/events.md §6.2.2): the user unbinds the
/// device named by `object`. The device's earlier events still count.
package struct DeviceRemovedPayload: KindPayload, Hashable {
    /// `device.removed`, code 2.
    package static let kind = EventKind.deviceRemoved
    /// One optional field, `reason` (0...200 bytes).
    package static let schema = PayloadSchema([optional("reason", .text(minBytes: 0, maxBytes: 200))])
    /// Why the device was removed (0...200 bytes of UTF-8); nil when absent.
    package var reason: String?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(reason: String? = nil) { self.reason = reason }
    /// Reads a `device.removed` payload; throws `schemaViolation` for a mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(reason: try FieldReader(payload: payload, kind: Self.kind).optionalText("reason"))
    }
    /// Encodes as `{reason?}`: the empty map when there is no reason.
    package var cbor: CBORValue { payloadMap([("reason", reason.map { .text($0) })]) }
}

/// A device's X25519 public key (Specs/encryption.md §3).
package struct DeviceKeyPayload: KindPayload, Hashable {
    /// `device.key`, code 3.
    package static let kind = EventKind.deviceKey
    /// One required field, `key` (32 bytes).
    package static let schema = PayloadSchema([required("key", .id32)])
    /// The signing device's X25519 public key. The format accepts any 32 bytes; which
    /// `device.key` counts is a projection rule (Specs/projections.md §6.10).
    package var key: Bytes32
    /// Builds the payload for a device's X25519 public key.
    package init(key: Bytes32) { self.key = key }
    /// Reads a `device.key` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(key: try FieldReader(payload: payload, kind: Self.kind).id("key"))
    }
    /// Encodes as `{key}`.
    package var cbor: CBORValue { .textMap([("key", .bytes(key.bytes))]) }
}

// MARK: Profiles and pictures

/// The payload of `profile.set` (Specs/events.md §6.2.3): sets or clears one field
/// of the profile of the user named by `object`.
package struct ProfileSetPayload: KindPayload, Hashable {
    /// `profile.set`, code 10.
    package static let kind = EventKind.profileSet
    /// Required `field` and `value`; a cross-field rule checks `value` against `field.valueType`.
    package static let schema = PayloadSchema(
        [
            required("field", .oneOf(ProfileField.allCases.map(\.rawValue))),
            required("value", .dependent),
        ],
        crossCheck: { payload in
            // `field` is known valid here; the value's type depends on it.
            guard let name = payload[text: "field"]?.textValue, let field = ProfileField(rawValue: name),
                let value = payload[text: "value"]
            else { return "profile.set needs field and value" }
            return FieldType.nullable(field.valueType).check(value, path: "value")
        })
    /// The profile field set (the wire field `field`).
    package var field: ProfileField
    /// `.null` clears the field.
    package var value: CBORValue
    /// Builds the payload; a nil `value` becomes `.null`, which clears the field.
    /// The value's type is checked only when the event is built against `schema`.
    package init(field: ProfileField, value: CBORValue?) {
        self.field = field
        self.value = value ?? .null
    }
    /// Reads a `profile.set` payload; throws `schemaViolation` when a field is missing,
    /// mistyped, or `field` is not a known profile field. `value` is taken as it is.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        guard let field = ProfileField(rawValue: try r.text("field")) else { throw r.fail("field", "a profile field") }
        self.init(field: field, value: try r.value("value"))
    }
    /// Encodes as `{field, value}`, with `value` `null` when cleared.
    package var cbor: CBORValue { .textMap([("field", .text(field.rawValue)), ("value", value)]) }
}

/// The payload of `picture.created` (Specs/events.md §6.2.4, purgeable): creates
/// the picture named by `object` and names its blob.
package struct PictureCreatedPayload: KindPayload, Hashable {
    /// `picture.created`, code 20.
    package static let kind = EventKind.pictureCreated
    /// Required `blob`, `size` and `mime`; optional `caption`, `width` and `height`.
    package static let schema = PayloadSchema([
        required("blob", .id32),
        required("size", .uint(min: 1, max: PayloadLimits.maxBlobSize)),
        required("mime", .oneOf(PayloadLimits.imageTypes)),
        optional("caption", .text(minBytes: 0, maxBytes: PayloadLimits.captionBytes)),
        optional("width", .uint(min: 1, max: 65535)),
        optional("height", .uint(min: 1, max: 65535)),
    ])
    /// The id of the picture's bytes: BLAKE2b-256 of the blob.
    package var blob: Hash32
    /// The blob's length in bytes, 1...2^40 (`PayloadLimits.maxBlobSize`).
    package var size: UInt64
    /// The blob's media type, one of `PayloadLimits.imageTypes`.
    package var mime: String
    /// The caption, 0...2000 bytes of UTF-8; nil when absent.
    package var caption: String?
    /// The width in pixels, 1...65535; nil when absent.
    package var width: UInt64?
    /// The height in pixels, 1...65535; nil when absent.
    package var height: UInt64?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(blob: Hash32, size: UInt64, mime: String, caption: String? = nil, width: UInt64? = nil, height: UInt64? = nil) {
        (self.blob, self.size, self.mime, self.caption, self.width, self.height) = (blob, size, mime, caption, width, height)
    }
    /// Reads a `picture.created` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(
            blob: try r.id("blob"), size: try r.uint("size"), mime: try r.text("mime"), caption: try r.optionalText("caption"),
            width: try r.optionalUInt("width"), height: try r.optionalUInt("height"))
    }
    /// Encodes as `{blob, size, mime, caption?, width?, height?}`, absent fields left out.
    package var cbor: CBORValue {
        payloadMap([
            ("blob", .bytes(blob.bytes)), ("size", .unsigned(size)), ("mime", .text(mime)), ("caption", caption.map { .text($0) }),
            ("width", width.map { .unsigned($0) }), ("height", height.map { .unsigned($0) }),
        ])
    }
}

/// The payload of `picture.captioned` (Specs/events.md §6.2.5, purgeable):
/// replaces the caption of the picture named by `object`.
package struct PictureCaptionedPayload: KindPayload, Hashable {
    /// `picture.captioned`, code 21.
    package static let kind = EventKind.pictureCaptioned
    /// One required field, `caption` (0...2000 bytes).
    package static let schema = PayloadSchema([required("caption", .text(minBytes: 0, maxBytes: PayloadLimits.captionBytes))])
    /// The new caption, 0...2000 bytes of UTF-8 (it may be empty).
    package var caption: String
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(caption: String) { self.caption = caption }
    /// Reads a `picture.captioned` payload; throws
    /// `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(caption: try FieldReader(payload: payload, kind: Self.kind).text("caption"))
    }
    /// Encodes as `{caption}`.
    package var cbor: CBORValue { .textMap([("caption", .text(caption))]) }
}

/// The payload of `picture.moved` (Specs/events.md §6.2.6): moves the picture named
/// by `object` within its owner's gallery.
package struct PictureMovedPayload: KindPayload, Hashable {
    /// `picture.moved`, code 22.
    package static let kind = EventKind.pictureMoved
    /// One required field, `position` (1...64 bytes).
    package static let schema = PayloadSchema([required("position", .bytes(minCount: 1, maxCount: 64))])
    /// A fractional index (Specs/projections.md §6.4).
    package var position: [UInt8]
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(position: [UInt8]) { self.position = position }
    /// Reads a `picture.moved` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(position: try FieldReader(payload: payload, kind: Self.kind).bytes("position"))
    }
    /// Encodes as `{position}`.
    package var cbor: CBORValue { .textMap([("position", .bytes(position))]) }
}

// MARK: Kinds with an empty payload, and removals naming the adds they saw

/// The payload of `picture.deleted` (Specs/events.md §6.2.7): no fields. Deleting
/// is final and purges the picture's payloads and blob (Specs/projections.md §6.3).
package struct PictureDeletedPayload: KindPayload, Hashable {
    /// `picture.deleted`, code 23.
    package static let kind = EventKind.pictureDeleted
    /// No fields: the empty map.
    package static var schema: PayloadSchema { Schemas.empty }
    /// The only payload: the empty map.
    package init() {}
    /// Reads a `picture.deleted` payload: there is nothing to read, so it never throws.
    package init(reading payload: CBORValue) throws(EventError) {}
    /// Encodes as the empty map (payload bytes `a0`).
    package var cbor: CBORValue { .textMap([]) }
}

/// The payload of `follow.added` (Specs/events.md §6.2.8): no fields; the user
/// followed is the event's `object`.
package struct FollowAddedPayload: KindPayload, Hashable {
    /// `follow.added`, code 30.
    package static let kind = EventKind.followAdded
    /// No fields: the empty map.
    package static var schema: PayloadSchema { Schemas.empty }
    /// The only payload: the empty map.
    package init() {}
    /// Reads a `follow.added` payload: there is nothing to read, so it never throws.
    package init(reading payload: CBORValue) throws(EventError) {}
    /// Encodes as the empty map (payload bytes `a0`).
    package var cbor: CBORValue { .textMap([]) }
}

/// The payload of `like.added` (Specs/events.md §6.2.10): no fields; the picture or
/// message liked is the event's `object`.
package struct LikeAddedPayload: KindPayload, Hashable {
    /// `like.added`, code 32.
    package static let kind = EventKind.likeAdded
    /// No fields: the empty map.
    package static var schema: PayloadSchema { Schemas.empty }
    /// The only payload: the empty map.
    package init() {}
    /// Reads a `like.added` payload: there is nothing to read, so it never throws.
    package init(reading payload: CBORValue) throws(EventError) {}
    /// Encodes as the empty map (payload bytes `a0`).
    package var cbor: CBORValue { .textMap([]) }
}

/// The payload of `block.added` (Specs/events.md §6.2.12): no fields; the user
/// blocked is the event's `object`.
package struct BlockAddedPayload: KindPayload, Hashable {
    /// `block.added`, code 34.
    package static let kind = EventKind.blockAdded
    /// No fields: the empty map.
    package static var schema: PayloadSchema { Schemas.empty }
    /// The only payload: the empty map.
    package init() {}
    /// Reads a `block.added` payload: there is nothing to read, so it never throws.
    package init(reading payload: CBORValue) throws(EventError) {}
    /// Encodes as the empty map (payload bytes `a0`).
    package var cbor: CBORValue { .textMap([]) }
}

/// The removals of the add-wins sets: `seen` names the adds removed.
package protocol RemovalPayload: KindPayload {
    /// The ids of the add events this removal cancels, 1...1024 of them; only adds by
    /// the same acting user under the same target are cancelled (Specs/projections.md §6.4).
    var seen: [EventID] { get }
    /// Builds a removal naming the adds in `seen`, unchecked until the event is built.
    init(seen: [EventID])
}

extension RemovalPayload {
    /// Reads a removal payload; throws `schemaViolation` when `seen` is missing or is not an
    /// array of 32-byte ids.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(seen: try FieldReader(payload: payload, kind: Self.kind).ids("seen"))
    }
    /// Encodes as `{seen: [id, …]}`, in the order given.
    package var cbor: CBORValue { .textMap([("seen", .array(seen.map { .bytes($0.bytes) }))]) }
    /// Required `seen` (`SEEN` = `array<id32>[1..1024]`), the same for every removal kind.
    package static var schema: PayloadSchema { Schemas.removal }
}

/// The payload of `follow.removed` (Specs/events.md §6.2.9): unfollows by naming the follows seen.
package struct FollowRemovedPayload: RemovalPayload, Hashable {
    /// `follow.removed`, code 31.
    package static let kind = EventKind.followRemoved
    /// The `follow.added` events this removal cancels.
    package var seen: [EventID]
    /// Builds a removal of the `follow.added` events in `seen`.
    package init(seen: [EventID]) { self.seen = seen }
}

/// The payload of `like.removed` (Specs/events.md §6.2.11): unlikes by naming the likes seen.
package struct LikeRemovedPayload: RemovalPayload, Hashable {
    /// `like.removed`, code 33.
    package static let kind = EventKind.likeRemoved
    /// The `like.added` events this removal cancels.
    package var seen: [EventID]
    /// Builds a removal of the `like.added` events in `seen`.
    package init(seen: [EventID]) { self.seen = seen }
}

/// The payload of `block.removed` (Specs/events.md §6.2.13): unblocks by naming the blocks seen.
package struct BlockRemovedPayload: RemovalPayload, Hashable {
    /// `block.removed`, code 35.
    package static let kind = EventKind.blockRemoved
    /// The `block.added` events this removal cancels.
    package var seen: [EventID]
    /// Builds a removal of the `block.added` events in `seen`.
    package init(seen: [EventID]) { self.seen = seen }
}

// MARK: Chats (content sealed: Specs/encryption.md §7)

/// The payload of `chat.created` (Specs/events.md §6.2.14): creates the chat named
/// by `object`; its creator joins as admin, `members` as non-admins.
package struct ChatCreatedPayload: KindPayload, Hashable {
    /// `chat.created`, code 40.
    package static let kind = EventKind.chatCreated
    /// Optional sealed `title` (up to 512 bytes) and optional `members` (up to 1024 user keys).
    package static let schema = PayloadSchema([
        optional("title", .sealed(maxBytes: PayloadLimits.sealedTitleBytes)),
        optional("members", .list(of: .id32, minCount: 0, maxCount: PayloadLimits.maxChatMembers)),
    ])
    /// The sealed title.
    package var title: [UInt8]?
    /// The members besides the creator (omitted from the encoding when empty).
    package var members: [PublicKey]
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(title: [UInt8]? = nil, members: [PublicKey] = []) {
        self.title = title
        self.members = members
    }
    /// Reads a `chat.created` payload (absent `members` reads as
    /// empty); throws `schemaViolation` for a mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(title: try r.optionalBytes("title"), members: payload[text: "members"] == nil ? [] : try r.ids("members"))
    }
    /// Encodes as `{title?, members?}`; `members` is left out when empty.
    package var cbor: CBORValue {
        payloadMap([("title", title.map { .bytes($0) }), ("members", members.isEmpty ? nil : .array(members.map { .bytes($0.bytes) }))])
    }
}

/// The payload of `chat.member.added` (Specs/events.md §6.2.15): an admin adds a
/// member to the chat named by `object`, or sets an existing member's admin flag.
package struct ChatMemberAddedPayload: KindPayload, Hashable {
    /// `chat.member.added`, code 41.
    package static let kind = EventKind.chatMemberAdded
    /// Required `user` (32 bytes); optional `admin` (a bool).
    package static let schema = PayloadSchema([required("user", .id32), optional("admin", .bool)])
    /// The user key of the member added.
    package var user: PublicKey
    /// Whether the member is an administrator; false when the wire field is absent.
    package var admin: Bool
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(user: PublicKey, admin: Bool = false) {
        self.user = user
        self.admin = admin
    }
    /// Reads a `chat.member.added` payload (absent `admin` reads as
    /// false); throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(user: try r.id("user"), admin: payload[text: "admin"]?.boolValue ?? false)
    }
    /// Encodes as `{user, admin?}`; `admin` is written only when true.
    package var cbor: CBORValue { payloadMap([("user", .bytes(user.bytes)), ("admin", admin ? .bool(true) : nil)]) }
}

/// The payload of `chat.member.removed` (Specs/events.md §6.2.16): an admin
/// removes a member from the chat named by `object`, or a member leaves.
package struct ChatMemberRemovedPayload: KindPayload, Hashable {
    /// `chat.member.removed`, code 42.
    package static let kind = EventKind.chatMemberRemoved
    /// One required field, `user` (32 bytes).
    package static let schema = PayloadSchema([required("user", .id32)])
    /// The user key of the member removed (the acting user's own key when leaving).
    package var user: PublicKey
    /// Builds the payload for removing `user`.
    package init(user: PublicKey) { self.user = user }
    /// Reads a `chat.member.removed` payload; throws
    /// `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(user: try FieldReader(payload: payload, kind: Self.kind).id("user"))
    }
    /// Encodes as `{user}`.
    package var cbor: CBORValue { .textMap([("user", .bytes(user.bytes))]) }
}

/// The payload of `message.sent` (Specs/events.md §6.2.17, purgeable): a message in
/// the chat named by `object`; the message's id is the event's id.
package struct MessageSentPayload: KindPayload, Hashable {
    /// `message.sent`, code 43.
    package static let kind = EventKind.messageSent
    /// Required sealed `body` (up to 4608 bytes); `blob` and `size` optional but only together.
    package static let schema = PayloadSchema(
        [
            required("body", .sealed(maxBytes: PayloadLimits.sealedBodyBytes)),
            optional("blob", .id32),
            optional("size", .uint(min: 1, max: PayloadLimits.maxBlobSize)),
        ],
        crossCheck: { payload in
            (payload[text: "blob"] == nil) != (payload[text: "size"] == nil) ? "message.sent needs blob and size together" : nil
        })
    /// The sealed body.
    package var body: [UInt8]
    /// Hash and size of the encrypted picture sent inside the message.
    package var blob: Hash32?
    /// The encrypted blob's length in bytes (the image's length + 16); nil exactly when
    /// `blob` is nil.
    package var size: UInt64?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(body: [UInt8], blob: Hash32? = nil, size: UInt64? = nil) {
        (self.body, self.blob, self.size) = (body, blob, size)
    }
    /// Reads a `message.sent` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(body: try r.bytes("body"), blob: try r.optionalID("blob"), size: try r.optionalUInt("size"))
    }
    /// Encodes as `{body, blob?, size?}`, absent fields left out.
    package var cbor: CBORValue {
        payloadMap([("body", .bytes(body)), ("blob", blob.map { .bytes($0.bytes) }), ("size", size.map { .unsigned($0) })])
    }
}

/// The payload of `message.edited` (Specs/events.md §6.2.18, purgeable): replaces
/// the text of the message named by `object`.
package struct MessageEditedPayload: KindPayload, Hashable {
    /// `message.edited`, code 44.
    package static let kind = EventKind.messageEdited
    /// Required `chat` and sealed `body` (up to 4608 bytes).
    package static let schema = PayloadSchema([
        required("chat", .id32),
        required("body", .sealed(maxBytes: PayloadLimits.sealedBodyBytes)),
    ])
    /// The id of the chat the edited message is in; it is also bound into `body`'s
    /// associated data (Specs/encryption.md §7).
    package var chat: ObjectID
    /// The sealed new text.
    package var body: [UInt8]
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(chat: ObjectID, body: [UInt8]) {
        self.chat = chat
        self.body = body
    }
    /// Reads a `message.edited` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(chat: try r.id("chat"), body: try r.bytes("body"))
    }
    /// Encodes as `{chat, body}`.
    package var cbor: CBORValue { .textMap([("chat", .bytes(chat.bytes)), ("body", .bytes(body))]) }
}

/// The payload of `message.deleted` (Specs/events.md §6.2.19): deletes the message
/// named by `object` and purges its payloads and blob.
package struct MessageDeletedPayload: KindPayload, Hashable {
    /// `message.deleted`, code 45.
    package static let kind = EventKind.messageDeleted
    /// One required field, `chat` (32 bytes).
    package static let schema = PayloadSchema([required("chat", .id32)])
    /// The id of the deleted message's chat; the deletion takes effect only if it matches.
    package var chat: ObjectID
    /// Builds the payload for a message in `chat`.
    package init(chat: ObjectID) { self.chat = chat }
    /// Reads a `message.deleted` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(chat: try FieldReader(payload: payload, kind: Self.kind).id("chat"))
    }
    /// Encodes as `{chat}`.
    package var cbor: CBORValue { .textMap([("chat", .bytes(chat.bytes))]) }
}

/// The payload of `chat.read` (Specs/events.md §6.2.20): the author's read position in
/// the chat named by `object`, which never moves backwards (Specs/projections.md §6.7).
package struct ChatReadPayload: KindPayload, Hashable {
    /// `chat.read`, code 46.
    package static let kind = EventKind.chatRead
    /// Required `message` and `hlc` (positive).
    package static let schema = PayloadSchema([required("message", .id32), required("hlc", .uint(min: 1, max: UInt64.max))])
    /// The id of the last message read (its `message.sent` event id).
    package var message: EventID
    /// The HLC of the message read up to.
    package var hlc: UInt64
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(message: EventID, hlc: UInt64) {
        self.message = message
        self.hlc = hlc
    }
    /// Reads a `chat.read` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(message: try r.id("message"), hlc: try r.uint("hlc"))
    }
    /// Encodes as `{message, hlc}`.
    package var cbor: CBORValue { .textMap([("message", .bytes(message.bytes)), ("hlc", .unsigned(hlc))]) }
}

/// An epoch key wrapped to devices (Specs/encryption.md §5).
package struct ChatKeyPayload: KindPayload, Hashable {
    /// `chat.key`, code 47.
    package static let kind = EventKind.chatKey
    /// Required `epoch`, `wraps` and `ephemeral`; `wraps` must be whole 80-byte wraps with
    /// device keys strictly increasing.
    package static let schema = PayloadSchema(
        [
            required("epoch", .id32),
            required("wraps", .bytes(minCount: PayloadLimits.wrapBytes, maxCount: PayloadLimits.wrapBytes * PayloadLimits.maxWraps)),
            required("ephemeral", .id32),
        ],
        crossCheck: { payload in
            guard let wraps = payload[text: "wraps"]?.bytesValue else { return "chat.key needs wraps" }
            guard wraps.count % PayloadLimits.wrapBytes == 0 else {
                return "wraps must be whole \(PayloadLimits.wrapBytes)-byte wraps, got \(wraps.count) bytes"
            }
            // Devices strictly increasing: one wrap per device, one encoding per set.
            var previous: ArraySlice<UInt8>? = nil
            for start in stride(from: 0, to: wraps.count, by: PayloadLimits.wrapBytes) {
                let device = wraps[start..<start + 32]
                if let previous, !previous.lexicographicallyPrecedes(device) {
                    return "wraps must be ordered by device key, strictly increasing"
                }
                previous = device
            }
            return nil
        })
    /// The epoch id, `epoch_id(chat, K)` (Specs/encryption.md §4).
    package var epoch: Hash32
    /// 80-byte wraps, ordered by device key.
    package var wraps: [UInt8]
    /// The event's ephemeral X25519 public key, fresh for each `chat.key`.
    package var ephemeral: Bytes32
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(epoch: Hash32, wraps: [UInt8], ephemeral: Bytes32) {
        (self.epoch, self.wraps, self.ephemeral) = (epoch, wraps, ephemeral)
    }
    /// Reads a `chat.key` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(epoch: try r.id("epoch"), wraps: try r.bytes("wraps"), ephemeral: try r.id("ephemeral"))
    }
    /// Encodes as `{epoch, wraps, ephemeral}`.
    package var cbor: CBORValue {
        .textMap([("epoch", .bytes(epoch.bytes)), ("wraps", .bytes(wraps)), ("ephemeral", .bytes(ephemeral.bytes))])
    }
    /// The devices wrapped to, in order.
    package var devices: [PublicKey] {
        stride(from: 0, to: wraps.count - wraps.count % PayloadLimits.wrapBytes, by: PayloadLimits.wrapBytes).compactMap {
            Bytes32(wraps[$0..<$0 + 32])
        }
    }
}

// MARK: Coins and slots

/// The payload of `coin.credited` (Specs/events.md §6.2.21): a configured issuer
/// credits bought coins to the device named by `object`.
package struct CoinCreditedPayload: KindPayload, Hashable {
    /// `coin.credited`, code 50.
    package static let kind = EventKind.coinCredited
    /// Required `user`, `amount` and `receipt` (1...256 bytes); optional `product`.
    package static let schema = PayloadSchema([
        required("user", .id32), Schemas.amount,
        required("receipt", .text(minBytes: 1, maxBytes: 256)),
        optional("product", .text(minBytes: 1, maxBytes: 128)),
    ])
    /// The user credited; the spending rights go to the device named by `object`
    /// (Specs/projections.md §6.9).
    package var user: PublicKey
    /// The coins credited, 1...10^12 (`AMOUNT`).
    package var amount: UInt64
    /// The store's transaction id: credited once however often delivered.
    package var receipt: String
    /// The store's product id, 1...128 bytes of UTF-8; nil when absent.
    package var product: String?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(user: PublicKey, amount: UInt64, receipt: String, product: String? = nil) {
        (self.user, self.amount, self.receipt, self.product) = (user, amount, receipt, product)
    }
    /// Reads a `coin.credited` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(user: try r.id("user"), amount: try r.uint("amount"), receipt: try r.text("receipt"), product: try r.optionalText("product"))
    }
    /// Encodes as `{user, amount, receipt, product?}`.
    package var cbor: CBORValue {
        payloadMap([
            ("user", .bytes(user.bytes)), ("amount", .unsigned(amount)), ("receipt", .text(receipt)), ("product", product.map { .text($0) }),
        ])
    }
}

/// The payload of `coin.spent` (Specs/events.md §6.2.22): a device spends coins of
/// its user's account, the user named by `object`.
package struct CoinSpentPayload: KindPayload, Hashable {
    /// `coin.spent`, code 51.
    package static let kind = EventKind.coinSpent
    /// Required `amount` and `for` (1...200 bytes).
    package static let schema = PayloadSchema([Schemas.amount, required("for", .text(minBytes: 1, maxBytes: 200))])
    /// The coins spent, 1...10^12 (`AMOUNT`).
    package var amount: UInt64
    /// What the coins were spent on (the wire field `for`).
    package var purpose: String
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(amount: UInt64, purpose: String) {
        self.amount = amount
        self.purpose = purpose
    }
    /// Reads a `coin.spent` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(amount: try r.uint("amount"), purpose: try r.text("for"))
    }
    /// Encodes as `{amount, for}`.
    package var cbor: CBORValue { .textMap([("amount", .unsigned(amount)), ("for", .text(purpose))]) }
}

/// The payload of `coin.given` (Specs/events.md §6.2.23): a device gives coins to
/// the user named by `object`.
package struct CoinGivenPayload: KindPayload, Hashable {
    /// `coin.given`, code 52.
    package static let kind = EventKind.coinGiven
    /// Required `amount`; optional `device` (32 bytes) and `note` (0...200 bytes).
    package static let schema = PayloadSchema([Schemas.amount, optional("device", .id32), optional("note", .text(minBytes: 0, maxBytes: 200))])
    /// The coins given, 1...10^12 (`AMOUNT`).
    package var amount: UInt64
    /// The receiving device, when the giver names one.
    package var device: PublicKey?
    /// A note to the recipient, 0...200 bytes of UTF-8; nil when absent.
    package var note: String?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(amount: UInt64, device: PublicKey? = nil, note: String? = nil) {
        (self.amount, self.device, self.note) = (amount, device, note)
    }
    /// Reads a `coin.given` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(amount: try r.uint("amount"), device: try r.optionalID("device"), note: try r.optionalText("note"))
    }
    /// Encodes as `{amount, device?, note?}`, absent fields left out.
    package var cbor: CBORValue {
        payloadMap([("amount", .unsigned(amount)), ("device", device.map { .bytes($0.bytes) }), ("note", note.map { .text($0) })])
    }
}

/// The payload of `coin.rights.moved` (Specs/events.md §6.2.24): moves spending
/// rights to the sibling device named by `object`.
package struct CoinRightsMovedPayload: KindPayload, Hashable {
    /// `coin.rights.moved`, code 53.
    package static let kind = EventKind.coinRightsMoved
    /// One required field, `amount` (`AMOUNT` = `uint[1..10^12]`).
    package static let schema = PayloadSchema([Schemas.amount])
    /// The coins whose spending rights move, 1...10^12 (`AMOUNT`).
    package var amount: UInt64
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(amount: UInt64) { self.amount = amount }
    /// Reads a `coin.rights.moved` payload; throws
    /// `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        self.init(amount: try FieldReader(payload: payload, kind: Self.kind).uint("amount"))
    }
    /// Encodes as `{amount}`.
    package var cbor: CBORValue { .textMap([("amount", .unsigned(amount))]) }
}

/// The payload of `slot.unlocked` (Specs/events.md §6.2.25): pays to unlock a lock
/// slot in the profile of the user named by `object`.
package struct SlotUnlockedPayload: KindPayload, Hashable {
    /// `slot.unlocked`, code 54.
    package static let kind = EventKind.slotUnlocked
    /// Required `slot` (0...63) and `price` (0...10^12).
    package static let schema = PayloadSchema([Schemas.slot, required("price", .uint(min: 0, max: PayloadLimits.maxCoinAmount))])
    /// The slot number, 0...63; slot 0 is free and cannot be unlocked.
    package var slot: UInt64
    /// The coins paid; it must equal the network's price for the slot (Specs/projections.md §6.9).
    package var price: UInt64
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(slot: UInt64, price: UInt64) {
        self.slot = slot
        self.price = price
    }
    /// Reads a `slot.unlocked` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(slot: try r.uint("slot"), price: try r.uint("price"))
    }
    /// Encodes as `{slot, price}`.
    package var cbor: CBORValue { .textMap([("slot", .unsigned(slot)), ("price", .unsigned(price))]) }
}

/// The payload of `slot.set` (Specs/events.md §6.2.26): puts a picture in a lock slot
/// of the profile of the user named by `object`, or empties it.
package struct SlotSetPayload: KindPayload, Hashable {
    /// `slot.set`, code 55.
    package static let kind = EventKind.slotSet
    /// Required `slot` (0...63) and `picture` (a picture id or `null`).
    package static let schema = PayloadSchema([Schemas.slot, required("picture", .nullable(.id32))])
    /// The slot number, 0...63; it takes effect only below the network's slot count.
    package var slot: UInt64
    /// nil empties the slot.
    package var picture: ObjectID?
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(slot: UInt64, picture: ObjectID?) {
        self.slot = slot
        self.picture = picture
    }
    /// Reads a `slot.set` payload (`null` reads as nil); throws
    /// `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(slot: try r.uint("slot"), picture: try r.optionalID("picture"))
    }
    /// Encodes as `{slot, picture}`, with `picture` `null` when the slot is emptied.
    package var cbor: CBORValue { .textMap([("slot", .unsigned(slot)), ("picture", picture.map { .bytes($0.bytes) } ?? .null)]) }
}

/// One relay of a user's relay list (Specs/events.md §6.2.29): a node that
/// serves the user's feeds (`home`) or accepts what others address to the
/// user (`inbox`), reached at `address` and proving `key` in its handshake.
public struct Relay: Sendable, Hashable, Codable {
    /// What a relay does for the user whose list names it.
    public struct Roles: OptionSet, Sendable, Hashable, Codable {
        /// Bit 0 `home`, bit 1 `inbox`: the byte `roles` holds per relay.
        public let rawValue: UInt8
        /// The roles of a `roles` byte.
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Holds and serves the user's feeds.
        public static let home = Roles(rawValue: 1)
        /// Accepts events addressed to the user from anyone.
        public static let inbox = Roles(rawValue: 2)
        /// Both roles.
        public static let all: Roles = [.home, .inbox]

        /// The role names, `home` before `inbox`.
        package var names: [String] { (contains(.home) ? ["home"] : []) + (contains(.inbox) ? ["inbox"] : []) }

        /// Roles from their names (`home`, `inbox`); nil for another name or none.
        package init?(names: [String]) {
            var roles: Roles = []
            for name in names {
                switch name {
                case "home": roles.insert(.home)
                case "inbox": roles.insert(.inbox)
                default: return nil
                }
            }
            guard !roles.isEmpty else { return nil }
            self = roles
        }
    }

    /// `host:port`: a DNS name or a bracketed IPv6 literal, and a port of
    /// 1 to 65535 (Specs/events.md §6.2.29); `setRelays` refuses another form.
    public var address: String
    /// The relay node's device key, which its Noise handshake must prove.
    public var key: PublicKey
    /// At least one role.
    public var roles: Roles

    /// A relay at `address` whose node proves `key`, doing `roles` for the user.
    public init(address: String, key: PublicKey, roles: Roles) {
        self.address = address
        self.key = key
        self.roles = roles
    }
}

/// The form of a relay address (Specs/events.md §6.2.29): `host:port`, the
/// host a DNS name of letters, digits, `-` and `.` (1 to 253 bytes) or an
/// IPv6 literal in brackets, the port 1 to 65535 in decimal without leading zeros.
package enum RelayAddress {
    /// Whether `address` has the form above.
    package static func isValid(_ address: String) -> Bool { split(address) != nil }

    /// The host (brackets removed from an IPv6 literal) and the port.
    package static func split(_ address: String) -> (host: String, port: Int)? {
        let bytes = Array(address.utf8)
        guard bytes.count <= 261, let colon = bytes.lastIndex(of: UInt8(ascii: ":")) else { return nil }
        let hostBytes = bytes[..<colon], portBytes = bytes[(colon + 1)...]
        guard !portBytes.isEmpty, portBytes.count <= 5, portBytes.first != UInt8(ascii: "0"),
            portBytes.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let port = Int(String(decoding: portBytes, as: UTF8.self)), (1...65535).contains(port)
        else { return nil }
        if hostBytes.first == UInt8(ascii: "[") {
            guard hostBytes.count >= 4, hostBytes.last == UInt8(ascii: "]") else { return nil }
            let inner = hostBytes.dropFirst().dropLast()
            let allowed = Set("0123456789abcdefABCDEF:.".utf8)
            guard inner.allSatisfy({ allowed.contains($0) }), inner.contains(UInt8(ascii: ":")) else { return nil }
            return (String(decoding: inner, as: UTF8.self), port)
        }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.".utf8)
        guard (1...253).contains(hostBytes.count), hostBytes.allSatisfy({ allowed.contains($0) }) else { return nil }
        return (String(decoding: hostBytes, as: UTF8.self), port)
    }
}

/// The payload of `relays.set` (Specs/events.md §6.2.29): the whole relay
/// list of the user named by `object`, in the user's order of preference;
/// an empty list clears it.
package struct RelaysSetPayload: KindPayload, Hashable {
    /// `relays.set`, code 60.
    package static let kind = EventKind.relaysSet
    /// Required `keys`, `addresses` and `roles`, one entry each per relay.
    package static let schema = PayloadSchema(
        [
            required("keys", .list(of: .id32, minCount: 0, maxCount: PayloadLimits.maxRelays)),
            required("addresses", .list(of: .text(minBytes: 3, maxBytes: 261), minCount: 0, maxCount: PayloadLimits.maxRelays)),
            required("roles", .bytes(minCount: 0, maxCount: PayloadLimits.maxRelays)),
        ],
        crossCheck: { payload in
            guard let keys = payload[text: "keys"]?.arrayValue, let addresses = payload[text: "addresses"]?.arrayValue,
                let roles = payload[text: "roles"]?.bytesValue
            else { return "relays.set needs keys, addresses and roles" }
            guard keys.count == addresses.count, keys.count == roles.count else {
                return "keys, addresses and roles must have one entry per relay (got \(keys.count), \(addresses.count), \(roles.count))"
            }
            for (i, address) in addresses.enumerated() where !RelayAddress.isValid(address.textValue ?? "") {
                return "addresses[\(i)] must be host:port (a DNS name or [IPv6 literal], a port 1...65535)"
            }
            if let i = roles.firstIndex(where: { $0 < 1 || $0 > 3 }) {
                return "roles[\(i)] must be 1 (home), 2 (inbox) or 3 (both), got \(roles[i])"
            }
            return nil
        })
    /// At most `PayloadLimits.maxRelays` relays, keys and addresses distinct.
    package var relays: [Relay]
    /// Builds the payload; nothing is checked until the event is built against `schema`.
    package init(relays: [Relay]) { self.relays = relays }
    /// Reads a `relays.set` payload; throws `schemaViolation` for a missing or mistyped field.
    package init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        guard let keys = try r.value("keys").arrayValue, let addresses = try r.value("addresses").arrayValue else {
            throw r.fail("keys and addresses", "arrays")
        }
        let roles = try r.bytes("roles")
        guard keys.count == addresses.count, keys.count == roles.count else { throw r.fail("keys, addresses and roles", "of one length") }
        var relays: [Relay] = []
        for i in keys.indices {
            guard let k = keys[i].bytesValue, let key = PublicKey(k) else { throw r.fail("keys[\(i)]", "32 bytes") }
            guard let address = addresses[i].textValue else { throw r.fail("addresses[\(i)]", "a text string") }
            relays.append(Relay(address: address, key: key, roles: Relay.Roles(rawValue: roles[i])))
        }
        self.init(relays: relays)
    }
    /// Encodes as `{keys, addresses, roles}`: two arrays and a byte string, one entry per relay.
    package var cbor: CBORValue {
        .textMap([
            ("keys", .array(relays.map { .bytes($0.key.bytes) })),
            ("addresses", .array(relays.map { .text($0.address) })),
            ("roles", .bytes(relays.map(\.roles.rawValue))),
        ])
    }
}

/// Schema parts several kinds share (Specs/events.md §6.2).
enum Schemas {
    static let seen = required("seen", .list(of: .id32, minCount: 1, maxCount: PayloadLimits.maxSeenTags))
    static let amount = required("amount", .uint(min: 1, max: PayloadLimits.maxCoinAmount))
    static let slot = required("slot", .uint(min: 0, max: PayloadLimits.maxSlots - 1))
    static let empty = PayloadSchema([])
    static let removal = PayloadSchema([seen])
}

extension HeadReader {
    /// A 32-byte string (an id or a key), read without a copy of its bytes.
    package mutating func bytes32() -> Bytes32? {
        var probe = self
        guard let slice = probe.bytes(count: 32), let value = Bytes32(slice) else { return nil }
        self = probe
        return value
    }
}

extension MessageSentPayload {
    /// Reads the canonical encoding (keys `blob`, `body`, `size` in that
    /// order, `blob` and `size` optional) in place: a chat page or list
    /// reads one per message. Nil for any other layout, which
    /// `init(reading:)` reads the long way and decides the same for this one.
    package static func readCanonical(_ raw: [UInt8]) -> MessageSentPayload? {
        var r = HeadReader(raw)
        guard var remaining = r.head(major: 5), (1...3).contains(remaining) else { return nil }
        var blob: Hash32? = nil
        if r.text("blob") {
            guard let b = r.bytes32() else { return nil }
            blob = b
            remaining -= 1
        }
        guard remaining > 0, r.text("body"), let body = r.byteString() else { return nil }
        remaining -= 1
        var size: UInt64? = nil
        if remaining > 0 {
            guard r.text("size"), let n = r.head(major: 0) else { return nil }
            size = n
            remaining -= 1
        }
        guard remaining == 0, r.atEnd else { return nil }
        return MessageSentPayload(body: body, blob: blob, size: size)
    }
}

extension MessageEditedPayload {
    /// Reads the canonical encoding (keys `body`, `chat`) in place; nil for
    /// any other layout, which `init(reading:)` reads the long way.
    package static func readCanonical(_ raw: [UInt8]) -> MessageEditedPayload? {
        var r = HeadReader(raw)
        guard r.head(major: 5) == 2, r.text("body"), let body = r.byteString(), r.text("chat"), let chat = r.bytes32(), r.atEnd else {
            return nil
        }
        return MessageEditedPayload(chat: chat, body: body)
    }
}
