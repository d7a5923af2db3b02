import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// How a projection shows a reference to a picture. References are resolved
/// when read, so a deleted picture disappears from everything that points at
/// it, and a picture not received yet shows as unresolved until it arrives.
public enum PictureReference: Hashable, Sendable {
    case picture(PictureView)
    /// The picture was deleted (or is not one the reference may show).
    case removed(ObjectID)
    /// This node has not received the picture yet.
    case unresolved(ObjectID)

    public var id: ObjectID {
        switch self {
        case .picture(let p): p.id
        case .removed(let id), .unresolved(let id): id
        }
    }
}

public struct PictureView: Hashable, Sendable {
    public let id: ObjectID
    public let owner: PublicKey
    public let createdBy: EventID
    public let hlc: HLC
    public let caption: String?
    public let mime: String?
    public let blob: Hash32?
    public let size: UInt64?
    public let width: UInt64?
    public let height: UInt64?
    public let position: [UInt8]
    /// The creation's payload was purged although no deletion is known here.
    public let contentPurged: Bool
}

public enum PictureLookup: Hashable, Sendable {
    case live(PictureView)
    case deleted(id: ObjectID, owner: PublicKey, at: HLC, by: EventID)
    case unknown(ObjectID)
}

public struct ProfileFieldValue: Hashable, Sendable {
    public let name: String
    public let value: CBORValue
    public let hlc: HLC
    public let author: PublicKey
    public let event: EventID
}

public struct DeviceView: Hashable, Sendable {
    public let device: PublicKey
    public let name: String?
    public let addedHLC: HLC
    public let removedHLC: HLC?
    public let rights: UInt64
}

public struct ProfileView: Hashable, Sendable {
    public let user: PublicKey
    /// The fields set (a cleared field holds `null`), by name.
    public let fields: [ProfileFieldValue]
    /// The avatar field resolved: nil when unset or cleared.
    public let avatar: PictureReference?
    public let devices: [DeviceView]

    public func field(_ name: String) -> CBORValue? { fields.first { $0.name == name }?.value }
}

public struct MemberView: Hashable, Sendable {
    public let user: PublicKey
    public let admin: Bool
    public let since: HLC
}

public struct ChatView: Hashable, Sendable {
    public let id: ObjectID
    /// The title, sealed to the chat's members (Specs/encryption.md §7);
    /// `Node` opens it on a member's device.
    public let sealedTitle: [UInt8]?
    public let creator: PublicKey
    public let createdHLC: HLC
    /// The `chat.created` event (its device sealed the title).
    public let createdBy: EventID
    public let members: [MemberView]
    public let messageCount: Int
}

public struct MessageView: Hashable, Sendable {
    public let id: EventID
    public let chat: ObjectID
    public let sender: PublicKey
    public let device: PublicKey
    public let hlc: HLC
    /// The sealed body (Specs/encryption.md §7): text, picture reference and
    /// attachment, readable on a member's device through `Node`. nil when
    /// deleted or purged.
    public let body: [UInt8]?
    /// The encrypted picture sent with the message: hash and size of its
    /// ciphertext blob.
    public let blob: Hash32?
    public let blobSize: UInt64?
    public let edited: HLC?
    /// The device that signed the winning edit (its body is sealed by it).
    public let editor: PublicKey?
    public let deleted: HLC?
    public let purged: Bool
    /// The epoch the body is sealed under (its first 32 bytes).
    public var epoch: Hash32? { body.flatMap { $0.count >= 32 ? Bytes32($0[0..<32]) : nil } }
    /// Pass as `before` to get the page of older messages.
    public var cursor: String { Hex.encode(Codec.u64(hlc.rawValue) + id.bytes) }
}

public struct ChatPage: Hashable, Sendable {
    public let chat: ChatView
    /// Oldest first.
    public let messages: [MessageView]
    /// The cursor for the next (older) page, nil when this is the first message.
    public let older: String?
    public let readMarkers: [PublicKey: HLC]
}

public struct BalanceView: Hashable, Sendable {
    public let user: PublicKey
    public let total: UInt64
    public let devices: [DeviceView]
    /// Rights held by the user key itself (gifts to a user with no device).
    public let userKeyRights: UInt64
}

public struct SlotView: Hashable, Sendable {
    public let slot: Int
    public let price: UInt64
    public let unlocked: Bool
    public let picture: PictureReference?
}

public struct NoEffectRecord: Hashable, Sendable {
    public let event: EventID
    public let reason: NoEffect
}

public enum QueryError: Error, Sendable, CustomStringConvertible {
    case badCursor(String)
    case unknownChat(ObjectID)

    public var description: String {
        switch self {
        case .badCursor(let c): "\"\(c)\" is not a chat cursor; use the cursor printed with the previous page"
        case .unknownChat(let id): "this node holds no chat \(id.hex)"
        }
    }
}

/// Read-only queries over the projections (the same ones `chorus query`
/// prints). Each call runs in one LMDB read transaction.
extension Projections {
    public func profile(_ user: PublicKey) throws -> ProfileView {
        try log.env.read { txn in
            var fields: [ProfileFieldValue] = []
            try txn.scan(state, prefix: Table.profile.key(user.bytes)) { key, value in
                let name = String(decoding: key[33...], as: UTF8.self)
                let v = try Codec.decode(value, "profile register")
                guard let a = v.arrayValue, a.count == 4, let hlc = a[1].unsignedValue, let author = a[2].id32,
                    let id = a[3].id32
                else { throw ProjectionError.corrupt("profile register") }
                fields.append(ProfileFieldValue(name: name, value: a[0], hlc: HLC(rawValue: hlc), author: author, event: id))
                return true
            }
            let avatar = fields.first { $0.name == "avatar" }?.value.id32
            return ProfileView(
                user: user, fields: fields,
                avatar: try avatar.map { try reference($0, requiredOwner: user, in: txn) },
                devices: try devices(of: user, in: txn))
        }
    }

    public func devices(of user: PublicKey) throws -> [DeviceView] {
        try log.env.read { txn in try devices(of: user, in: txn) }
    }

    func devices(of user: PublicKey, in txn: Transaction) throws -> [DeviceView] {
        var out: [DeviceView] = []
        var keys: [PublicKey] = []
        try txn.scan(state, prefix: Table.userDevice.key(user.bytes)) { key, _ in
            keys.append(try Codec.b32(key[33...], "device"))
            return true
        }
        for d in keys {
            guard let raw = try txn.get(state, Table.device.key(d.bytes)) else { continue }
            let b = try DeviceBinding.decode(raw)
            out.append(
                DeviceView(device: d, name: b.name, addedHLC: b.addedHLC, removedHLC: b.removedHLC, rights: try rights(d, in: txn)))
        }
        return out.sorted { ($0.addedHLC, $0.device) < ($1.addedHLC, $1.device) }
    }

    /// The user a key acts for now (itself unless it is a bound device).
    public func user(of key: PublicKey) throws -> PublicKey {
        try log.env.read { txn in
            try txn.get(state, Table.device.key(key.bytes)).map { try DeviceBinding.decode($0).user } ?? key
        }
    }

    public func binding(of device: PublicKey) throws -> DeviceBinding? {
        try log.env.read { txn in try txn.get(state, Table.device.key(device.bytes)).map(DeviceBinding.decode) }
    }

    // MARK: Pictures

    public func picture(_ id: ObjectID) throws -> PictureLookup {
        try log.env.read { txn in try lookup(id, in: txn) }
    }

    func lookup(_ id: ObjectID, in txn: Transaction) throws -> PictureLookup {
        guard let raw = try txn.get(state, Table.picture.key(id.bytes)) else { return .unknown(id) }
        let r = try PictureRecord.decode(raw)
        if let deleted = r.deleted { return .deleted(id: id, owner: r.owner, at: deleted, by: r.deletedBy ?? .zero) }
        return .live(Self.view(id, r))
    }

    static func view(_ id: ObjectID, _ r: PictureRecord) -> PictureView {
        PictureView(
            id: id, owner: r.owner, createdBy: r.createdBy, hlc: r.hlc, caption: r.caption, mime: r.mime, blob: r.blob,
            size: r.size, width: r.width, height: r.height, position: r.position ?? GalleryPosition.initial(r.hlc),
            contentPurged: r.purged)
    }

    /// Resolves a picture reference. A picture owned by someone other than
    /// `requiredOwner` shows as removed: an avatar or slot shows only the
    /// owner's own pictures.
    func reference(_ id: ObjectID, requiredOwner: PublicKey? = nil, in txn: Transaction) throws -> PictureReference {
        switch try lookup(id, in: txn) {
        case .live(let view):
            if let requiredOwner, view.owner != requiredOwner { return .removed(id) }
            return .picture(view)
        case .deleted: return .removed(id)
        case .unknown: return .unresolved(id)
        }
    }

    /// A reference to a picture resolved now (Specs/projections.md §7.1):
    /// what a decrypted message's `picture` shows.
    public func reference(to id: ObjectID) throws -> PictureReference {
        try log.env.read { txn in try reference(id, in: txn) }
    }

    /// A user's gallery in its user-defined order.
    public func pictures(of user: PublicKey, limit: Int = .max, offset: Int = 0) throws -> [PictureView] {
        try log.env.read { txn in
            var ids: [ObjectID] = []
            var skipped = 0
            try txn.scan(state, prefix: Table.gallery.key(user.bytes)) { key, _ in
                if skipped < offset {
                    skipped += 1
                    return true
                }
                ids.append(try Codec.b32(key.suffix(32), "picture id"))
                return ids.count < limit
            }
            return try ids.compactMap { id in
                if case .live(let v) = try lookup(id, in: txn) { return v }
                return nil
            }
        }
    }

    /// Pictures of the users `viewer` follows, newest first, leaving out
    /// users the viewer blocked. `before` is an HLC to page back from.
    public func feed(for viewer: PublicKey, limit: Int = 50, before: HLC? = nil) throws -> [PictureView] {
        try log.env.read { txn in
            let blocked = Set(try targets(.block, of: viewer, in: txn))
            var candidates: [(hlc: HLC, id: ObjectID)] = []
            for followed in try targets(.follow, of: viewer, in: txn) where !blocked.contains(followed) {
                let prefix = Table.picturesByTime.key(followed.bytes)
                let upper = before.map { prefix + Codec.u64($0.rawValue) }
                var taken = 0
                try txn.scanBackward(state, prefix: prefix, before: upper) { key, _ in
                    candidates.append((HLC(rawValue: Codec.readU64(key[33..<41])), try Codec.b32(key.suffix(32), "picture id")))
                    taken += 1
                    return taken < limit
                }
            }
            candidates.sort { ($0.hlc, $0.id) > ($1.hlc, $1.id) }
            return try candidates.prefix(limit).compactMap { c in
                if case .live(let v) = try lookup(c.id, in: txn) { return v }
                return nil
            }
        }
    }

    // MARK: Relationships

    func targets(_ cls: ObjectClass, of actor: PublicKey, in txn: Transaction) throws -> [PublicKey] {
        var out: [PublicKey] = []
        try txn.scan(state, prefix: Table.edgeOut.key([cls.rawValue], actor.bytes)) { key, _ in
            out.append(try Codec.b32(key.suffix(32), "edge target"))
            return true
        }
        return out
    }

    func actors(_ cls: ObjectClass, on target: Bytes32, in txn: Transaction) throws -> [PublicKey] {
        var out: [PublicKey] = []
        try txn.scan(state, prefix: Table.edge.key([cls.rawValue], target.bytes)) { key, _ in
            out.append(try Codec.b32(key.suffix(32), "edge actor"))
            return true
        }
        return out
    }

    /// Users following `user`, leaving out those `user` blocked.
    public func followers(of user: PublicKey) throws -> [PublicKey] {
        try log.env.read { txn in
            let blocked = Set(try targets(.block, of: user, in: txn))
            return try actors(.follow, on: user, in: txn).filter { !blocked.contains($0) }
        }
    }

    public func following(_ user: PublicKey) throws -> [PublicKey] {
        try log.env.read { txn in try targets(.follow, of: user, in: txn) }
    }

    public func blocked(by user: PublicKey) throws -> [PublicKey] {
        try log.env.read { txn in try targets(.block, of: user, in: txn) }
    }

    /// Users who like a picture or message; empty once a picture is deleted.
    public func likes(of object: Bytes32) throws -> [PublicKey] {
        try log.env.read { txn in
            if case .deleted = try lookup(object, in: txn) { return [] }
            return try actors(.like, on: object, in: txn)
        }
    }

    /// The live add events of `actor`'s edge to `target`: what a removal
    /// must name to cancel it.
    public func liveAdds(_ kind: EventKind, from actor: PublicKey, to target: Bytes32) throws -> [EventID] {
        let cls: ObjectClass =
            switch kind {
            case .followAdded, .followRemoved: .follow
            case .likeAdded, .likeRemoved: .like
            default: .block
            }
        return try log.env.read { txn in
            guard let raw = try txn.get(state, Table.edge.key([cls.rawValue], target.bytes, actor.bytes)) else { return [] }
            return stride(from: 0, to: raw.count, by: 32).compactMap { Bytes32(raw[$0..<min(raw.count, $0 + 32)]) }
        }
    }

    // MARK: Chats

    /// Chats `user` is a member of now.
    public func chats(of user: PublicKey) throws -> [ChatView] {
        try log.env.read { txn in
            var ids: [ObjectID] = []
            try txn.scan(state, prefix: Table.userChat.key(user.bytes)) { key, _ in
                ids.append(try Codec.b32(key.suffix(32), "chat id"))
                return true
            }
            return try ids.compactMap { try chatView($0, in: txn) }.sorted { ($0.createdHLC, $0.id) < ($1.createdHLC, $1.id) }
        }
    }

    /// A chat's record and current members, nil when this node holds no creation.
    public func chatView(_ id: ObjectID) throws -> ChatView? {
        try log.env.read { txn in try chatView(id, in: txn) }
    }

    func chatView(_ id: ObjectID, in txn: Transaction) throws -> ChatView? {
        guard let raw = try txn.get(state, Table.chat.key(id.bytes)) else { return nil }
        let v = try Codec.decode(raw, "chat record")
        guard let creator = v[text: "creator"]?.id32, let hlc = v[text: "hlc"]?.unsignedValue, let by = v[text: "created_by"]?.id32
        else { throw ProjectionError.corrupt("chat record") }
        var members: [MemberView] = []
        try txn.scan(state, prefix: Table.member.key(id.bytes)) { key, value in
            let m = try Membership.decode(value)
            if m.isCurrent, let since = m.intervals.last?.from {
                members.append(MemberView(user: try Codec.b32(key[33...], "member"), admin: m.admin, since: since))
            }
            return true
        }
        let count = try txn.get(state, Table.messageCount.key(id.bytes)).map { Int(Codec.readU64($0[...])) } ?? 0
        return ChatView(
            id: id, sealedTitle: v[text: "title"]?.bytesValue, creator: creator, createdHLC: HLC(rawValue: hlc), createdBy: by, members: members,
            messageCount: count)
    }

    /// A page of a chat's messages, oldest first: the `limit` newest
    /// messages before `before` (a cursor from an earlier page). Messages
    /// from users `viewer` blocked are left out.
    public func chat(_ id: ObjectID, viewer: PublicKey? = nil, limit: Int = 50, before: String? = nil) throws -> ChatPage {
        try log.env.read { txn in
            guard let chat = try chatView(id, in: txn) else { throw QueryError.unknownChat(id) }
            let blocked = Set(try viewer.map { try targets(.block, of: $0, in: txn) } ?? [])
            let prefix = Table.message.key(id.bytes)
            var upper: [UInt8]? = nil
            if let before {
                guard let raw = Hex.decode(before), raw.count == 40 else { throw QueryError.badCursor(before) }
                upper = prefix + raw
            }
            var messages: [MessageView] = []
            var more = false
            try txn.scanBackward(state, prefix: prefix, before: upper) { key, value in
                if messages.count == limit {
                    more = true
                    return false
                }
                let m = try messageView(key: key, value: value, chat: id, in: txn)
                if !blocked.contains(m.sender) { messages.append(m) }
                return true
            }
            messages.reverse()
            var markers: [PublicKey: HLC] = [:]
            try txn.scan(state, prefix: Table.read.key(id.bytes)) { key, value in
                let v = try Codec.decode(value, "read marker")
                if let a = v.arrayValue, let hlc = a.first?.unsignedValue {
                    markers[try Codec.b32(key[33...], "reader")] = HLC(rawValue: hlc)
                }
                return true
            }
            return ChatPage(chat: chat, messages: messages, older: more ? messages.first?.cursor : nil, readMarkers: markers)
        }
    }

    func messageView(key: [UInt8], value: [UInt8], chat: ObjectID, in txn: Transaction) throws -> MessageView {
        let v = try Codec.decode(value, "message record")
        guard let sender = v[text: "sender"]?.id32, let device = v[text: "device"]?.id32,
            let hlc = v[text: "hlc"]?.unsignedValue
        else { throw ProjectionError.corrupt("message record") }
        return MessageView(
            id: try Codec.b32(key.suffix(32), "message id"), chat: chat, sender: sender, device: device,
            hlc: HLC(rawValue: hlc), body: v[text: "body"]?.bytesValue, blob: v[text: "blob"]?.id32,
            blobSize: v[text: "size"]?.unsignedValue, edited: v[text: "edited"]?.unsignedValue.map(HLC.init(rawValue:)),
            editor: v[text: "editor"]?.id32,
            deleted: v[text: "deleted"]?.unsignedValue.map(HLC.init(rawValue:)), purged: v[text: "purged"]?.boolValue ?? false)
    }

    /// The chat a message belongs to, when it took effect here.
    public func message(_ id: EventID) throws -> MessageView? {
        try log.env.read { txn in
            guard let raw = try firstFact(.message, id, in: txn),
                raw.count >= 33, let chat = Bytes32(raw[1..<33])
            else { return nil }
            var found: MessageView? = nil
            try txn.scan(state, prefix: Table.message.key(chat.bytes)) { key, value in
                if key.suffix(32).elementsEqual(id.bytes) {
                    found = try messageView(key: key, value: value, chat: chat, in: txn)
                    return false
                }
                return true
            }
            return found
        }
    }

    static func factKeyPrefix(_ cls: ObjectClass, _ object: Bytes32) -> [UInt8] { [cls.rawValue] + object.bytes }

    func firstFact(_ cls: ObjectClass, _ object: Bytes32, in txn: Transaction) throws -> [UInt8]? {
        var found: [UInt8]? = nil
        try txn.scan(facts, prefix: Self.factKeyPrefix(cls, object)) { _, value in
            if value.first == UInt8(EventKind.messageSent.code) {
                found = value
                return false
            }
            return true
        }
        return found
    }

    // MARK: Coins and slots

    func rights(_ key: PublicKey, in txn: Transaction) throws -> UInt64 {
        try txn.get(state, Table.rights.key(key.bytes)).map { Codec.readU64($0[...]) } ?? 0
    }

    /// Spending rights of one device (or key).
    public func rights(of key: PublicKey) throws -> UInt64 {
        try log.env.read { txn in try rights(key, in: txn) }
    }

    /// A user's balance: the rights of every device bound to them (removed
    /// devices included: their coins are still the user's) plus any held by
    /// the user key itself.
    public func balance(of user: PublicKey) throws -> BalanceView {
        try log.env.read { txn in
            let devices = try devices(of: user, in: txn)
            let own = try rights(user, in: txn)
            return BalanceView(user: user, total: devices.reduce(own) { $0 + $1.rights }, devices: devices, userKeyRights: own)
        }
    }

    public func slots(of user: PublicKey) throws -> [SlotView] {
        try log.env.read { txn in
            try config.slotPrices.enumerated().map { slot, price in
                let unlockedBy = try txn.get(state, Table.slotUnlock.key(user.bytes, [UInt8(slot)]))
                let unlocked = slot == 0 || unlockedBy != nil
                var picture: PictureReference? = nil
                if unlocked, let raw = try txn.get(state, Table.slot.key(user.bytes, [UInt8(slot)])) {
                    let v = try Codec.decode(raw, "slot register")
                    if let id = v.arrayValue?.first?.id32 { picture = try reference(id, requiredOwner: user, in: txn) }
                }
                return SlotView(slot: slot, price: price, unlocked: unlocked, picture: picture)
            }
        }
    }

    /// Every coin decision in merge order (for audits).
    public func ledger() throws -> [(order: MergeOrder, entry: LedgerEntry)] {
        try log.env.read { txn in
            var out: [(MergeOrder, LedgerEntry)] = []
            try txn.scan(state, prefix: [Table.ledger.rawValue]) { key, value in
                out.append((try MergeOrder(bytes: key[1...]), try LedgerEntry.decode(value)))
                return true
            }
            return out
        }
    }

    /// Every receipt credited, with the event that credited it.
    public func receipts() throws -> [(receipt: String, event: EventID)] {
        try log.env.read { txn in
            var out: [(String, EventID)] = []
            try txn.scan(state, prefix: [Table.receipt.rawValue]) { key, value in
                out.append((String(decoding: key[1...], as: UTF8.self), try Codec.b32(value[...], "event id")))
                return true
            }
            return out
        }
    }

    /// Rights of every key holding any, in key order.
    public func allRights() throws -> [(key: PublicKey, rights: UInt64)] {
        try log.env.read { txn in
            var out: [(PublicKey, UInt64)] = []
            try txn.scan(state, prefix: [Table.rights.rawValue]) { key, value in
                out.append((try Codec.b32(key[1...], "rights key"), Codec.readU64(value[...])))
                return true
            }
            return out
        }
    }

    // MARK: Decisions

    /// Why an event took no effect, or nil when it took effect (or is unknown).
    public func noEffect(_ id: EventID) throws -> NoEffect? {
        try log.env.read { txn in try txn.get(state, Table.noEffect.key(id.bytes)).map(Self.decodeNoEffect) }
    }

    /// Every event that took no effect, with the reason.
    public func noEffects(limit: Int = .max) throws -> [NoEffectRecord] {
        try log.env.read { txn in
            var out: [NoEffectRecord] = []
            guard limit > 0 else { return out }
            try txn.scan(state, prefix: [Table.noEffect.rawValue]) { key, value in
                out.append(NoEffectRecord(event: try Codec.b32(key[1...], "event id"), reason: try Self.decodeNoEffect(value)))
                return out.count < limit
            }
            return out
        }
    }

    static func decodeNoEffect(_ raw: [UInt8]) throws -> NoEffect {
        let v = try Codec.decode(raw, "no-effect record")
        guard let a = v.arrayValue, a.count == 2, let code = a[0].textValue, let detail = a[1].textValue else {
            throw ProjectionError.corrupt("no-effect record")
        }
        return NoEffect(code, detail)
    }
}
