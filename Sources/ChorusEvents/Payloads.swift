import ChorusCBOR
import ChorusCrypto

/// One typed payload per known kind (Specs/events.md §6.2): its schema, its
/// builder (`cbor`) and its reader (`init(reading:)`) side by side.
/// `EventKind.payloadType` maps every known kind to its type through an
/// exhaustive switch, so a kind without one does not compile
/// (Specs/adding-a-kind.md).
public protocol KindPayload: Sendable {
    static var kind: EventKind { get }
    static var schema: PayloadSchema { get }
    /// Reads a payload that conforms to `schema` (every stored payload does:
    /// it was checked before it was stored). Throws `schemaViolation` otherwise.
    init(reading payload: CBORValue) throws(EventError)
    /// The payload as deterministic CBOR input (the encoder sorts the keys).
    var cbor: CBORValue { get }
}

extension EventKind {
    /// The typed payload of a known kind; nil for a kind this version does not know.
    public var payloadType: (any KindPayload.Type)? {
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

public struct DeviceAddedPayload: KindPayload, Hashable {
    public static let kind = EventKind.deviceAdded
    public static var schema: PayloadSchema { Schemas.deviceAdded }
    public var name: String?
    /// The device's signature consenting to the user (`DeviceBinding.proof`).
    public var proof: [UInt8]?
    public init(name: String? = nil, proof: [UInt8]? = nil) {
        self.name = name
        self.proof = proof
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(name: try r.optionalText("name"), proof: try r.optionalBytes("proof"))
    }
    public var cbor: CBORValue { payloadMap([("name", name.map { .text($0) }), ("proof", proof.map { .bytes($0) })]) }
}

public struct DeviceRemovedPayload: KindPayload, Hashable {
    public static let kind = EventKind.deviceRemoved
    public static var schema: PayloadSchema { Schemas.deviceRemoved }
    public var reason: String?
    public init(reason: String? = nil) { self.reason = reason }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(reason: try FieldReader(payload: payload, kind: Self.kind).optionalText("reason"))
    }
    public var cbor: CBORValue { payloadMap([("reason", reason.map { .text($0) })]) }
}

/// A device's X25519 public key (Specs/encryption.md §3).
public struct DeviceKeyPayload: KindPayload, Hashable {
    public static let kind = EventKind.deviceKey
    public static var schema: PayloadSchema { Schemas.deviceKey }
    public var key: Bytes32
    public init(key: Bytes32) { self.key = key }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(key: try FieldReader(payload: payload, kind: Self.kind).id("key"))
    }
    public var cbor: CBORValue { .textMap([("key", .bytes(key.bytes))]) }
}

// MARK: Profiles and pictures

public struct ProfileSetPayload: KindPayload, Hashable {
    public static let kind = EventKind.profileSet
    public static var schema: PayloadSchema { Schemas.profileSet }
    public var field: ProfileField
    /// `.null` clears the field.
    public var value: CBORValue
    public init(field: ProfileField, value: CBORValue?) {
        self.field = field
        self.value = value ?? .null
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        guard let field = ProfileField(rawValue: try r.text("field")) else { throw r.fail("field", "a profile field") }
        self.init(field: field, value: try r.value("value"))
    }
    public var cbor: CBORValue { .textMap([("field", .text(field.rawValue)), ("value", value)]) }
}

public struct PictureCreatedPayload: KindPayload, Hashable {
    public static let kind = EventKind.pictureCreated
    public static var schema: PayloadSchema { Schemas.pictureCreated }
    public var blob: Hash32
    public var size: UInt64
    public var mime: String
    public var caption: String?
    public var width: UInt64?
    public var height: UInt64?
    public init(blob: Hash32, size: UInt64, mime: String, caption: String? = nil, width: UInt64? = nil, height: UInt64? = nil) {
        (self.blob, self.size, self.mime, self.caption, self.width, self.height) = (blob, size, mime, caption, width, height)
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(
            blob: try r.id("blob"), size: try r.uint("size"), mime: try r.text("mime"), caption: try r.optionalText("caption"),
            width: try r.optionalUInt("width"), height: try r.optionalUInt("height"))
    }
    public var cbor: CBORValue {
        payloadMap([
            ("blob", .bytes(blob.bytes)), ("size", .unsigned(size)), ("mime", .text(mime)), ("caption", caption.map { .text($0) }),
            ("width", width.map { .unsigned($0) }), ("height", height.map { .unsigned($0) }),
        ])
    }
}

public struct PictureCaptionedPayload: KindPayload, Hashable {
    public static let kind = EventKind.pictureCaptioned
    public static var schema: PayloadSchema { Schemas.pictureCaptioned }
    public var caption: String
    public init(caption: String) { self.caption = caption }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(caption: try FieldReader(payload: payload, kind: Self.kind).text("caption"))
    }
    public var cbor: CBORValue { .textMap([("caption", .text(caption))]) }
}

public struct PictureMovedPayload: KindPayload, Hashable {
    public static let kind = EventKind.pictureMoved
    public static var schema: PayloadSchema { Schemas.pictureMoved }
    /// A fractional index (Specs/projections.md §6.4).
    public var position: [UInt8]
    public init(position: [UInt8]) { self.position = position }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(position: try FieldReader(payload: payload, kind: Self.kind).bytes("position"))
    }
    public var cbor: CBORValue { .textMap([("position", .bytes(position))]) }
}

// MARK: Kinds with an empty payload, and removals naming the adds they saw

public struct PictureDeletedPayload: KindPayload, Hashable {
    public static let kind = EventKind.pictureDeleted
    public static var schema: PayloadSchema { Schemas.empty }
    public init() {}
    public init(reading payload: CBORValue) throws(EventError) {}
    public var cbor: CBORValue { .textMap([]) }
}

public struct FollowAddedPayload: KindPayload, Hashable {
    public static let kind = EventKind.followAdded
    public static var schema: PayloadSchema { Schemas.empty }
    public init() {}
    public init(reading payload: CBORValue) throws(EventError) {}
    public var cbor: CBORValue { .textMap([]) }
}

public struct LikeAddedPayload: KindPayload, Hashable {
    public static let kind = EventKind.likeAdded
    public static var schema: PayloadSchema { Schemas.empty }
    public init() {}
    public init(reading payload: CBORValue) throws(EventError) {}
    public var cbor: CBORValue { .textMap([]) }
}

public struct BlockAddedPayload: KindPayload, Hashable {
    public static let kind = EventKind.blockAdded
    public static var schema: PayloadSchema { Schemas.empty }
    public init() {}
    public init(reading payload: CBORValue) throws(EventError) {}
    public var cbor: CBORValue { .textMap([]) }
}

/// The removals of the add-wins sets: `seen` names the adds removed.
public protocol RemovalPayload: KindPayload {
    var seen: [EventID] { get }
    init(seen: [EventID])
}

extension RemovalPayload {
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(seen: try FieldReader(payload: payload, kind: Self.kind).ids("seen"))
    }
    public var cbor: CBORValue { .textMap([("seen", .array(seen.map { .bytes($0.bytes) }))]) }
    public static var schema: PayloadSchema { Schemas.removal }
}

public struct FollowRemovedPayload: RemovalPayload, Hashable {
    public static let kind = EventKind.followRemoved
    public var seen: [EventID]
    public init(seen: [EventID]) { self.seen = seen }
}

public struct LikeRemovedPayload: RemovalPayload, Hashable {
    public static let kind = EventKind.likeRemoved
    public var seen: [EventID]
    public init(seen: [EventID]) { self.seen = seen }
}

public struct BlockRemovedPayload: RemovalPayload, Hashable {
    public static let kind = EventKind.blockRemoved
    public var seen: [EventID]
    public init(seen: [EventID]) { self.seen = seen }
}

// MARK: Chats (content sealed: Specs/encryption.md §7)

public struct ChatCreatedPayload: KindPayload, Hashable {
    public static let kind = EventKind.chatCreated
    public static var schema: PayloadSchema { Schemas.chatCreated }
    /// The sealed title.
    public var title: [UInt8]?
    /// The members besides the creator (omitted from the encoding when empty).
    public var members: [PublicKey]
    public init(title: [UInt8]? = nil, members: [PublicKey] = []) {
        self.title = title
        self.members = members
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(title: try r.optionalBytes("title"), members: payload[text: "members"] == nil ? [] : try r.ids("members"))
    }
    public var cbor: CBORValue {
        payloadMap([("title", title.map { .bytes($0) }), ("members", members.isEmpty ? nil : .array(members.map { .bytes($0.bytes) }))])
    }
}

public struct ChatMemberAddedPayload: KindPayload, Hashable {
    public static let kind = EventKind.chatMemberAdded
    public static var schema: PayloadSchema { Schemas.chatMemberAdded }
    public var user: PublicKey
    public var admin: Bool
    public init(user: PublicKey, admin: Bool = false) {
        self.user = user
        self.admin = admin
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(user: try r.id("user"), admin: payload[text: "admin"]?.boolValue ?? false)
    }
    public var cbor: CBORValue { payloadMap([("user", .bytes(user.bytes)), ("admin", admin ? .bool(true) : nil)]) }
}

public struct ChatMemberRemovedPayload: KindPayload, Hashable {
    public static let kind = EventKind.chatMemberRemoved
    public static var schema: PayloadSchema { Schemas.chatMemberRemoved }
    public var user: PublicKey
    public init(user: PublicKey) { self.user = user }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(user: try FieldReader(payload: payload, kind: Self.kind).id("user"))
    }
    public var cbor: CBORValue { .textMap([("user", .bytes(user.bytes))]) }
}

public struct MessageSentPayload: KindPayload, Hashable {
    public static let kind = EventKind.messageSent
    public static var schema: PayloadSchema { Schemas.messageSent }
    /// The sealed body.
    public var body: [UInt8]
    /// Hash and size of the encrypted picture sent inside the message.
    public var blob: Hash32?
    public var size: UInt64?
    public init(body: [UInt8], blob: Hash32? = nil, size: UInt64? = nil) {
        (self.body, self.blob, self.size) = (body, blob, size)
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(body: try r.bytes("body"), blob: try r.optionalID("blob"), size: try r.optionalUInt("size"))
    }
    public var cbor: CBORValue {
        payloadMap([("body", .bytes(body)), ("blob", blob.map { .bytes($0.bytes) }), ("size", size.map { .unsigned($0) })])
    }
}

public struct MessageEditedPayload: KindPayload, Hashable {
    public static let kind = EventKind.messageEdited
    public static var schema: PayloadSchema { Schemas.messageEdited }
    public var chat: ObjectID
    /// The sealed new text.
    public var body: [UInt8]
    public init(chat: ObjectID, body: [UInt8]) {
        self.chat = chat
        self.body = body
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(chat: try r.id("chat"), body: try r.bytes("body"))
    }
    public var cbor: CBORValue { .textMap([("chat", .bytes(chat.bytes)), ("body", .bytes(body))]) }
}

public struct MessageDeletedPayload: KindPayload, Hashable {
    public static let kind = EventKind.messageDeleted
    public static var schema: PayloadSchema { Schemas.messageDeleted }
    public var chat: ObjectID
    public init(chat: ObjectID) { self.chat = chat }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(chat: try FieldReader(payload: payload, kind: Self.kind).id("chat"))
    }
    public var cbor: CBORValue { .textMap([("chat", .bytes(chat.bytes))]) }
}

public struct ChatReadPayload: KindPayload, Hashable {
    public static let kind = EventKind.chatRead
    public static var schema: PayloadSchema { Schemas.chatRead }
    public var message: EventID
    /// The HLC of the message read up to.
    public var hlc: UInt64
    public init(message: EventID, hlc: UInt64) {
        self.message = message
        self.hlc = hlc
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(message: try r.id("message"), hlc: try r.uint("hlc"))
    }
    public var cbor: CBORValue { .textMap([("message", .bytes(message.bytes)), ("hlc", .unsigned(hlc))]) }
}

/// An epoch key wrapped to devices (Specs/encryption.md §5).
public struct ChatKeyPayload: KindPayload, Hashable {
    public static let kind = EventKind.chatKey
    public static var schema: PayloadSchema { Schemas.chatKey }
    public var epoch: Hash32
    /// 80-byte wraps, ordered by device key.
    public var wraps: [UInt8]
    public var ephemeral: Bytes32
    public init(epoch: Hash32, wraps: [UInt8], ephemeral: Bytes32) {
        (self.epoch, self.wraps, self.ephemeral) = (epoch, wraps, ephemeral)
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(epoch: try r.id("epoch"), wraps: try r.bytes("wraps"), ephemeral: try r.id("ephemeral"))
    }
    public var cbor: CBORValue {
        .textMap([("epoch", .bytes(epoch.bytes)), ("wraps", .bytes(wraps)), ("ephemeral", .bytes(ephemeral.bytes))])
    }
    /// The devices wrapped to, in order.
    public var devices: [PublicKey] {
        stride(from: 0, to: wraps.count - wraps.count % PayloadLimits.wrapBytes, by: PayloadLimits.wrapBytes).compactMap {
            Bytes32(wraps[$0..<$0 + 32])
        }
    }
}

// MARK: Coins and slots

public struct CoinCreditedPayload: KindPayload, Hashable {
    public static let kind = EventKind.coinCredited
    public static var schema: PayloadSchema { Schemas.coinCredited }
    public var user: PublicKey
    public var amount: UInt64
    /// The store's transaction id: credited once however often delivered.
    public var receipt: String
    public var product: String?
    public init(user: PublicKey, amount: UInt64, receipt: String, product: String? = nil) {
        (self.user, self.amount, self.receipt, self.product) = (user, amount, receipt, product)
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(user: try r.id("user"), amount: try r.uint("amount"), receipt: try r.text("receipt"), product: try r.optionalText("product"))
    }
    public var cbor: CBORValue {
        payloadMap([
            ("user", .bytes(user.bytes)), ("amount", .unsigned(amount)), ("receipt", .text(receipt)), ("product", product.map { .text($0) }),
        ])
    }
}

public struct CoinSpentPayload: KindPayload, Hashable {
    public static let kind = EventKind.coinSpent
    public static var schema: PayloadSchema { Schemas.coinSpent }
    public var amount: UInt64
    /// What the coins were spent on (the wire field `for`).
    public var purpose: String
    public init(amount: UInt64, purpose: String) {
        self.amount = amount
        self.purpose = purpose
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(amount: try r.uint("amount"), purpose: try r.text("for"))
    }
    public var cbor: CBORValue { .textMap([("amount", .unsigned(amount)), ("for", .text(purpose))]) }
}

public struct CoinGivenPayload: KindPayload, Hashable {
    public static let kind = EventKind.coinGiven
    public static var schema: PayloadSchema { Schemas.coinGiven }
    public var amount: UInt64
    /// The receiving device, when the giver names one.
    public var device: PublicKey?
    public var note: String?
    public init(amount: UInt64, device: PublicKey? = nil, note: String? = nil) {
        (self.amount, self.device, self.note) = (amount, device, note)
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(amount: try r.uint("amount"), device: try r.optionalID("device"), note: try r.optionalText("note"))
    }
    public var cbor: CBORValue {
        payloadMap([("amount", .unsigned(amount)), ("device", device.map { .bytes($0.bytes) }), ("note", note.map { .text($0) })])
    }
}

public struct CoinRightsMovedPayload: KindPayload, Hashable {
    public static let kind = EventKind.coinRightsMoved
    public static var schema: PayloadSchema { Schemas.coinRightsMoved }
    public var amount: UInt64
    public init(amount: UInt64) { self.amount = amount }
    public init(reading payload: CBORValue) throws(EventError) {
        self.init(amount: try FieldReader(payload: payload, kind: Self.kind).uint("amount"))
    }
    public var cbor: CBORValue { .textMap([("amount", .unsigned(amount))]) }
}

public struct SlotUnlockedPayload: KindPayload, Hashable {
    public static let kind = EventKind.slotUnlocked
    public static var schema: PayloadSchema { Schemas.slotUnlocked }
    public var slot: UInt64
    public var price: UInt64
    public init(slot: UInt64, price: UInt64) {
        self.slot = slot
        self.price = price
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(slot: try r.uint("slot"), price: try r.uint("price"))
    }
    public var cbor: CBORValue { .textMap([("slot", .unsigned(slot)), ("price", .unsigned(price))]) }
}

public struct SlotSetPayload: KindPayload, Hashable {
    public static let kind = EventKind.slotSet
    public static var schema: PayloadSchema { Schemas.slotSet }
    public var slot: UInt64
    /// nil empties the slot.
    public var picture: ObjectID?
    public init(slot: UInt64, picture: ObjectID?) {
        self.slot = slot
        self.picture = picture
    }
    public init(reading payload: CBORValue) throws(EventError) {
        let r = FieldReader(payload: payload, kind: Self.kind)
        self.init(slot: try r.uint("slot"), picture: try r.optionalID("picture"))
    }
    public var cbor: CBORValue { .textMap([("slot", .unsigned(slot)), ("picture", picture.map { .bytes($0.bytes) } ?? .null)]) }
}
