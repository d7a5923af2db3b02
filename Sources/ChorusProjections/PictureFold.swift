import ChorusCBOR
import ChorusCrypto
import ChorusEvents

/// Gallery positions: byte strings compared as if right-padded with zero
/// bytes to 64 (Specs/projections.md §6.3).
package enum GalleryPosition {
    /// The length in bytes positions are padded to before comparing, and the
    /// longest a `picture.moved` position may be.
    package static let width = 64

    /// A picture's position until it is first moved: its creation HLC.
    package static func initial(_ hlc: HLC) -> [UInt8] { Codec.u64(hlc.rawValue) }

    /// `position` right-padded with zero bytes to `width` (cut to it if
    /// longer): the form gallery keys hold, so key order is gallery order.
    package static func padded(_ position: [UInt8]) -> [UInt8] {
        Array(position.prefix(width)) + [UInt8](repeating: 0, count: max(0, width - position.count))
    }

    /// A position strictly between `low` and `high` (nil: the start or the
    /// end of the gallery), or nil when there is no room within 64 bytes.
    package static func between(_ low: [UInt8]?, _ high: [UInt8]?) -> [UInt8]? {
        let a = padded(low ?? [])
        let b = high.map(padded)
        if let b, !a.lexicographicallyPrecedes(b) { return nil }
        var out: [UInt8] = []
        var boundedAbove = b != nil
        for i in 0..<width {
            let lo = Int(a[i])
            let hi = boundedAbove ? Int(b?[i] ?? 0) : 256
            if hi - lo > 1 {
                out.append(UInt8((lo + hi) / 2))
                return out
            }
            out.append(UInt8(lo))
            if hi - lo == 1 { boundedAbove = false }
        }
        return nil
    }
}

/// The reasons a picture's events take no effect (Specs/projections.md
/// §6.3), one wording for the whole and the one-at-a-time fold.
enum PictureRule {
    static func foreign(_ picture: ObjectID) -> NoEffect {
        NoEffect("foreign_id", "picture id \(picture.short) is not bound to the key that signed its creation")
    }
    static func exists(_ picture: ObjectID) -> NoEffect {
        NoEffect("picture_exists", "picture \(picture.short) was already created by an earlier event")
    }
    static func unknown(_ picture: ObjectID) -> NoEffect {
        NoEffect("picture_unknown", "this node holds no creation of picture \(picture.short) before this event")
    }
    static func notOwner(_ owner: PublicKey) -> NoEffect { NoEffect("not_owner", "only user \(owner.short) may change this picture") }
    static let afterDeletion = NoEffect("after_deletion", "the picture was deleted before this event")
}

extension FoldRun {
    /// A picture: created once, caption and position registers written by
    /// its owner, deletion final (Specs/projections.md §6.3).
    mutating func foldPicture(_ picture: ObjectID) throws {
        var created: (fact: Fact, owner: PublicKey)? = nil
        var caption: String? = nil
        var position: [UInt8]? = nil
        var deleted: Fact? = nil
        var orders = PictureOrders()
        let all = try facts(.picture, picture)
        let bound = CreatedID.isBoundToACreation(picture, all.lazy.filter { $0.kind == .pictureCreated }.map(\.author))
        for f in all {
            guard let user = try actingUserOrRecord(f) else { continue }
            if f.kind == .pictureCreated {
                guard !bound || CreatedID.isBound(picture, to: f.author) else {
                    try decide(f, PictureRule.foreign(picture))
                    continue
                }
                if created != nil {
                    try decide(f, PictureRule.exists(picture))
                    continue
                }
                created = (f, user)
                caption = f.readIfHeld(PictureCreatedPayload.self)?.caption
                try decide(f, nil)
                continue
            }
            guard let owner = created?.owner else {
                try decide(f, PictureRule.unknown(picture))
                continue
            }
            guard user == owner else {
                try decide(f, PictureRule.notOwner(owner))
                continue
            }
            if deleted != nil {
                try decide(f, PictureRule.afterDeletion)
                continue
            }
            switch f.kind {
            case .pictureCaptioned:
                caption = f.readIfHeld(PictureCaptionedPayload.self)?.caption
                orders.caption = f.order
            case .pictureMoved:
                position = f.readIfHeld(PictureMovedPayload.self)?.position
                orders.position = f.order
            case .pictureDeleted:
                deleted = f
            default:
                throw ProjectionError.corrupt("\(f.kind.name) filed as a picture fact")
            }
            try decide(f, nil)
        }
        let recordKey = Table.picture.key(picture)
        var wasPurged = false
        // The blob the stored record references (its `blobRef` entry).
        var oldBlob: Hash32? = nil
        let oldRaw = try txn.get(p.state, recordKey)
        if let oldRaw {
            let old = try PictureRecord.decode(oldRaw)
            for key in old.indexKeys(picture) { try deleteState(key) }
            wasPurged = old.purged
            if old.isLive { oldBlob = old.blob }
        }
        guard let created else {
            try deleteState(recordKey)
            try writeOrders(picture, PictureOrders(), mayBeStored: oldRaw != nil)
            try setPayloadGap(.picture, picture, was: wasPurged, now: false)
            if let oldBlob { try blobUnreferenced(oldBlob) }
            return
        }
        let payload = created.fact.readIfHeld(PictureCreatedPayload.self)
        var record = PictureRecord(owner: created.owner, author: created.fact.author, hlc: created.fact.hlc, createdBy: created.fact.id)
        if let deleted {
            record.deleted = deleted.hlc
            record.deletedBy = deleted.id
            // A deleted picture's fold reads only who deleted it.
            orders = PictureOrders(deletionAuthor: deleted.author)
            if purging { purgeContent(of: picture, all) } else if bulk { deletedInBulk.pictures.append(picture) }
        } else if let payload {
            record.blob = payload.blob
            record.size = payload.size
            record.mime = payload.mime
            record.width = payload.width
            record.height = payload.height
            record.caption = caption
            record.position = position ?? GalleryPosition.initial(created.fact.hlc)
        } else {
            record.position = position ?? GalleryPosition.initial(created.fact.hlc)
            record.purged = true
        }
        try putState(recordKey, record.encoded())
        for key in record.indexKeys(picture) { try putState(key, []) }
        try writeOrders(picture, orders, mayBeStored: oldRaw != nil)
        try setPayloadGap(.picture, picture, was: wasPurged, now: record.purged)
        let blob = record.isLive ? record.blob : nil
        if let blob { try blobReferenced(blob) }
        if let oldBlob, oldBlob != blob { try blobUnreferenced(oldBlob) }
    }

    /// Folds one new event of `picture` from its record and `PictureOrders`
    /// alone where they decide it, as the whole fold would (Specs/projections.md
    /// §9.1); false when the picture must be folded whole: a creation that
    /// may take effect, its first deletion, a deletion before the effective
    /// one, an edit of a picture whose creation's payload is not held.
    mutating func foldPictureFact(_ picture: ObjectID, _ f: Fact) throws -> Bool {
        let recordKey = Table.picture.key(picture)
        guard let raw = try txn.get(p.state, recordKey) else {
            // No creation took effect, so any other event comes before one.
            guard f.kind != .pictureCreated else { return false }
            guard try actingUserOrRecord(f) != nil else { return true }
            try decide(f, PictureRule.unknown(picture))
            return true
        }
        var record = try PictureRecord.decode(raw)
        let creation = MergeOrder(hlc: record.hlc, author: record.author, id: record.createdBy)
        if f.kind == .pictureCreated {
            return try foldLaterCreation(f, of: picture, effective: creation, foreign: PictureRule.foreign, exists: PictureRule.exists)
        }
        guard let user = try actingUserOrRecord(f) else { return true }
        guard f.order > creation else {
            try decide(f, PictureRule.unknown(picture))
            return true
        }
        guard user == record.owner else {
            try decide(f, PictureRule.notOwner(record.owner))
            return true
        }
        var orders = try storedOrders(picture)
        if let deletedHLC = record.deleted {
            guard let by = record.deletedBy, let author = orders.deletionAuthor else {
                throw ProjectionError.corrupt("deleted picture \(picture.short) without the order of its deletion")
            }
            if f.order > MergeOrder(hlc: deletedHLC, author: author, id: by) {
                try decide(f, PictureRule.afterDeletion)
                return true
            }
            // An edit before the deletion takes effect and is purged with the rest.
            guard f.kind != .pictureDeleted else { return false }
            try decide(f, nil)
            if purging { purge(f) }
            return true
        }
        switch f.kind {
        case .pictureCaptioned:
            guard !record.purged else { return false }
            try decide(f, nil)
            if let winner = orders.caption, winner > f.order { return true }
            record.caption = f.readIfHeld(PictureCaptionedPayload.self)?.caption
            orders.caption = f.order
        case .pictureMoved:
            try decide(f, nil)
            if let winner = orders.position, winner > f.order { return true }
            let initial = GalleryPosition.initial(record.hlc)
            try deleteState(Table.gallery.key(record.owner, GalleryPosition.padded(record.position ?? initial), picture))
            record.position = f.readIfHeld(PictureMovedPayload.self)?.position ?? initial
            try putState(Table.gallery.key(record.owner, GalleryPosition.padded(record.position ?? initial), picture), [])
            orders.position = f.order
        case .pictureDeleted:
            return false
        default:
            throw ProjectionError.corrupt("\(f.kind.name) filed as a picture fact")
        }
        try putState(recordKey, record.encoded())
        // A register changed, so the entry did.
        try putIndex(IndexTable.pictureOrders.key(picture), orders.encoded())
        return true
    }

    /// The picture's `pictureOrders` entry (empty when it has none).
    func storedOrders(_ picture: ObjectID) throws -> PictureOrders {
        try txn.get(p.index, IndexTable.pictureOrders.key(picture)).map(PictureOrders.decode) ?? PictureOrders()
    }

    /// Puts the picture's `pictureOrders` entry, or deletes it when empty,
    /// unless the stored one is the same. A picture without a record has
    /// none stored (`mayBeStored` false): a new picture's fold reads nothing.
    mutating func writeOrders(_ picture: ObjectID, _ orders: PictureOrders, mayBeStored: Bool) throws {
        let key = IndexTable.pictureOrders.key(picture)
        if bulk || !mayBeStored {
            if !orders.isEmpty { try putIndex(key, orders.encoded()) }
            return
        }
        let stored = try storedOrders(picture)
        guard stored != orders else { return }
        if orders.isEmpty { try deleteIndex(key) } else { try putIndex(key, orders.encoded()) }
    }
}

/// What a picture's record leaves out and its one-at-a-time fold reads
/// (Specs/projections.md §9.1, `pictureOrders`): the merge orders of the
/// winning caption edit and move of a live picture, the author of a deleted
/// picture's deletion.
struct PictureOrders: Equatable {
    var caption: MergeOrder? = nil
    var position: MergeOrder? = nil
    var deletionAuthor: PublicKey? = nil

    var isEmpty: Bool { caption == nil && position == nil && deletionAuthor == nil }

    /// u8(flags: 1 caption, 2 position, 4 deletion author) ‖ the fields the flags name, in that order.
    func encoded() -> [UInt8] {
        var out: [UInt8] = [(caption == nil ? 0 : 1) | (position == nil ? 0 : 2) | (deletionAuthor == nil ? 0 : 4)]
        if let caption { caption.append(to: &out) }
        if let position { position.append(to: &out) }
        if let deletionAuthor { deletionAuthor.append(to: &out) }
        return out
    }

    static func decode(_ raw: [UInt8]) throws -> PictureOrders {
        guard let flags = raw.first, flags & ~7 == 0,
            raw.count == 1 + (flags & 1 == 0 ? 0 : 72) + (flags & 2 == 0 ? 0 : 72) + (flags & 4 == 0 ? 0 : 32)
        else { throw ProjectionError.corrupt("picture orders of \(raw.count) bytes") }
        var out = PictureOrders()
        var at = 1
        if flags & 1 != 0 {
            out.caption = try MergeOrder(bytes: raw[at..<at + 72])
            at += 72
        }
        if flags & 2 != 0 {
            out.position = try MergeOrder(bytes: raw[at..<at + 72])
            at += 72
        }
        if flags & 4 != 0 { out.deletionAuthor = try Codec.b32(raw[at...], "deletion author") }
        return out
    }
}

extension FoldRun {
    /// Purges a deleted picture's payloads and, unless a live picture still
    /// uses them, its blob bytes (Specs/projections.md §6.3).
    mutating func purgeContent(of picture: ObjectID, _ all: [Fact]) {
        // Every creation's blob, the ones that took no effect too: none is
        // wanted once the picture is gone (a live picture's is kept, §6.3).
        for f in all {
            purge(f)
            if f.kind == .pictureCreated, let blob = f.readIfHeld(PictureCreatedPayload.self)?.blob { purges.blobs.append(blob) }
        }
    }
}

/// The projected state of one picture (Specs/projections.md §6.3).
package struct PictureRecord: Hashable, Sendable {
    /// The acting user of the creation: the only user who may edit or delete.
    package var owner: PublicKey
    /// The device (or key) that signed the `picture.created`.
    package var author: PublicKey
    /// HLC of the creation; the feed orders by it.
    package var hlc: HLC
    /// Id of the effective `picture.created`.
    package var createdBy: EventID
    /// Hash of the picture's bytes; nil when deleted or purged.
    package var blob: Hash32? = nil
    /// Size of the blob in bytes; nil when deleted or purged.
    package var size: UInt64? = nil
    /// Media type of the blob, e.g. `image/jpeg`; nil when deleted or purged.
    package var mime: String? = nil
    /// Width in pixels; nil when the creation gave none, or deleted or purged.
    package var width: UInt64? = nil
    /// Height in pixels; nil when the creation gave none, or deleted or purged.
    package var height: UInt64? = nil
    /// The caption register: the latest effective caption, else the creation's;
    /// nil when there is none, or deleted or purged.
    package var caption: String? = nil
    /// The gallery position: the latest effective `picture.moved`, else
    /// `u64be(created hlc)`; nil when deleted.
    package var position: [UInt8]? = nil
    /// HLC of the effective `picture.deleted`; nil while the picture is live.
    package var deleted: HLC? = nil
    /// Id of that `picture.deleted`; nil while the picture is live.
    package var deletedBy: EventID? = nil
    /// The creation's payload was purged here although no deletion is held.
    package var purged = false

    /// Whether no effective deletion is held (a purged record is still live).
    package var isLive: Bool { deleted == nil }

    /// The record's canonical CBOR map (Specs/projections.md §5), written
    /// directly (`RecordMapWriter`): a rebuild encodes one per picture.
    func encoded() -> [UInt8] {
        let optional = [blob != nil, size != nil, mime != nil, width != nil, height != nil, caption != nil, position != nil,
            deleted != nil, deletedBy != nil, purged]
        var w = RecordMapWriter(
            entries: 4 + optional.filter { $0 }.count,
            capacity: 240 + (caption?.utf8.count ?? 0) + (mime?.utf8.count ?? 0) + (position?.count ?? 0))
        w.key("hlc"); w.unsigned(hlc.rawValue)
        if let blob { w.key("blob"); w.bytes(blob) }
        if let mime { w.key("mime"); w.text(mime) }
        if let size { w.key("size"); w.unsigned(size) }
        w.key("owner"); w.bytes(owner)
        if let width { w.key("width"); w.unsigned(width) }
        w.key("author"); w.bytes(author)
        if let height { w.key("height"); w.unsigned(height) }
        if purged { w.key("purged"); w.true() }
        if let caption { w.key("caption"); w.text(caption) }
        if let deleted { w.key("deleted"); w.unsigned(deleted.rawValue) }
        if let position { w.key("position"); w.bytes(position) }
        w.key("created_by"); w.bytes(createdBy)
        if let deletedBy { w.key("deleted_by"); w.bytes(deletedBy) }
        return w.out
    }

    static func decode(_ raw: [UInt8]) throws -> PictureRecord {
        let v = try Codec.decode(raw, "picture record")
        guard let owner = v[text: "owner"]?.id32, let author = v[text: "author"]?.id32,
            let hlc = v[text: "hlc"]?.unsignedValue, let createdBy = v[text: "created_by"]?.id32
        else { throw ProjectionError.corrupt("picture record") }
        var r = PictureRecord(owner: owner, author: author, hlc: HLC(rawValue: hlc), createdBy: createdBy)
        r.blob = v[text: "blob"]?.id32
        r.size = v[text: "size"]?.unsignedValue
        r.mime = v[text: "mime"]?.textValue
        r.width = v[text: "width"]?.unsignedValue
        r.height = v[text: "height"]?.unsignedValue
        r.caption = v[text: "caption"]?.textValue
        r.position = v[text: "position"]?.bytesValue
        r.deleted = v[text: "deleted"]?.unsignedValue.map(HLC.init(rawValue:))
        r.deletedBy = v[text: "deleted_by"]?.id32
        r.purged = v[text: "purged"]?.boolValue ?? false
        return r
    }

    /// The gallery, time and blob index entries of a live picture.
    func indexKeys(_ id: ObjectID) -> [[UInt8]] {
        guard isLive else { return [] }
        var keys = [
            Table.gallery.key(owner, GalleryPosition.padded(position ?? GalleryPosition.initial(hlc)), id),
            Table.picturesByTime.key(owner, Codec.u64(hlc.rawValue), id),
        ]
        if let blob { keys.append(Table.blobRef.key(blob, id)) }
        return keys
    }
}
