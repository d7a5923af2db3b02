import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage
import HeapModule

/// How a projection shows a reference to a picture. References are resolved
/// when read, so a deleted picture disappears from everything that points at
/// it, and a picture not received yet shows as unresolved until it arrives.
public enum PictureReference: Hashable, Sendable, Codable {
    /// The picture is live (and, for avatars and slots, owned by the referring
    /// user).
    case picture(PictureView)
    /// The picture was deleted (or is not one the reference may show).
    case removed(PictureID)
    /// This node has not received the picture yet.
    case unresolved(PictureID)

    /// The id referred to, whatever the picture's state.
    public var id: PictureID {
        switch self {
        case .picture(let p): p.id
        case .removed(let id), .unresolved(let id): id
        }
    }
}

/// A live picture as queries show it (Specs/projections.md §6.3). Fields of the
/// creation's payload are nil when it was purged (`contentPurged`).
public struct PictureView: Hashable, Sendable, Codable {
    /// The picture id, chosen by the creating device.
    public let id: PictureID
    /// The user who created the picture and alone may change it.
    public let owner: UserID
    /// Id of the effective `picture.created`.
    public let createdBy: EventID
    /// HLC of the creation; the feed orders by it, newest first.
    public let hlc: HLC
    /// The current caption; nil when there is none or `contentPurged`.
    public let caption: String?
    /// Media type of the blob, e.g. `image/png`; nil when `contentPurged`.
    public let mime: String?
    /// Hash of the picture's bytes (the blob to fetch or read); nil when
    /// `contentPurged`.
    public let blob: Hash32?
    /// Size of the blob in bytes; nil when `contentPurged`.
    public let size: UInt64?
    /// Width in pixels; nil when the creation gave none or `contentPurged`.
    public let width: UInt64?
    /// Height in pixels; nil when the creation gave none or `contentPurged`.
    public let height: UInt64?
    /// Gallery position: the latest effective `picture.moved`, else
    /// `u64be(created hlc)`; compare with `GalleryPosition.padded`.
    public let position: [UInt8]
    /// The creation's payload was purged although no deletion is known here.
    public let contentPurged: Bool
}

/// What this node holds of a picture id, without the reference rules of
/// `PictureReference`.
public enum PictureLookup: Hashable, Sendable {
    /// The picture exists and is not deleted.
    case live(PictureView)
    /// The picture was deleted: its owner, and the HLC and id of the effective
    /// `picture.deleted`.
    case deleted(id: PictureID, owner: UserID, at: HLC, by: EventID)
    /// No creation of this id is held (not arrived yet, or never made).
    case unknown(PictureID)
}

extension Projections {
    // MARK: Pictures

    /// Looks a picture up by id: live, deleted or unknown.
    package func picture(_ id: PictureID) throws -> PictureLookup {
        try log.env.read { txn in try lookup(id.raw, in: txn) }
    }

    func lookup(_ id: ObjectID, in txn: Transaction) throws -> PictureLookup {
        guard let raw = try txn.get(state, Table.picture.key(id)) else { return .unknown(PictureID(id)) }
        let r = try PictureRecord.decode(raw)
        if let deleted = r.deleted { return .deleted(id: PictureID(id), owner: UserID(r.owner), at: deleted, by: r.deletedBy ?? .zero) }
        return .live(Self.view(id, r))
    }

    static func view(_ id: ObjectID, _ r: PictureRecord) -> PictureView {
        PictureView(
            id: PictureID(id), owner: UserID(r.owner), createdBy: r.createdBy, hlc: r.hlc, caption: r.caption, mime: r.mime, blob: r.blob,
            size: r.size, width: r.width, height: r.height, position: r.position ?? GalleryPosition.initial(r.hlc),
            contentPurged: r.purged)
    }

    /// Resolves a picture reference. A picture owned by someone other than
    /// `requiredOwner` shows as removed: an avatar or slot shows only the
    /// owner's own pictures.
    func reference(_ id: ObjectID, requiredOwner: PublicKey? = nil, in txn: Transaction) throws -> PictureReference {
        switch try lookup(id, in: txn) {
        case .live(let view):
            if let requiredOwner, view.owner.raw != requiredOwner { return .removed(view.id) }
            return .picture(view)
        case .deleted: return .removed(PictureID(id))
        case .unknown: return .unresolved(PictureID(id))
        }
    }

    /// A reference to a picture resolved now (Specs/projections.md §7.1):
    /// what a decrypted message's `picture` shows.
    package func reference(to id: PictureID) throws -> PictureReference {
        try log.env.read { txn in try reference(id.raw, in: txn) }
    }

    /// A user's gallery in its user-defined order.
    package func pictures(of user: UserID, limit: Int = .max, offset: Int = 0) throws -> [PictureView] {
        try pictures(of: user.raw, limit: limit, offset: offset)
    }

    package func pictures(of user: PublicKey, limit: Int = .max, offset: Int = 0) throws -> [PictureView] {
        try log.env.read { txn in
            var ids: [ObjectID] = []
            var skipped = 0
            try txn.scan(state, prefix: Table.gallery.key(user)) { key, _ in
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
    package func feed(for viewer: UserID, limit: Int = 50, before: HLC? = nil) throws -> [PictureView] {
        try feed(for: viewer.raw, limit: limit, before: before)
    }

    package func feed(for viewer: PublicKey, limit: Int = 50, before: HLC? = nil) throws -> [PictureView] {
        try log.env.read { txn in
            let blocked = Set(try targets(.block, of: viewer, in: txn))
            // A merge of the followed users' `picturesByTime` entries, newest
            // first: one search for each followed user's newest picture,
            // then one step back in that user's walk for each picture taken.
            return try txn.withBackwardWalks(state) { walks in
                func head(_ key: [UInt8], walk: Int) throws -> FeedHead {
                    FeedHead(hlc: HLC(rawValue: Codec.readU64(key[33..<41])), id: try Codec.b32(key.suffix(32), "picture id"), walk: walk)
                }
                var heads = Heap<FeedHead>()
                for followed in try targets(.follow, of: viewer, in: txn) where !blocked.contains(followed) {
                    let upper = before.map { Table.picturesByTime.key(followed, Codec.u64($0.rawValue)) }
                    if let (walk, key) = try walks.start(prefix: Table.picturesByTime.key(followed), before: upper) {
                        heads.insert(try head(key, walk: walk))
                    }
                }
                var out: [PictureView] = []
                while out.count < limit, let top = heads.popMax() {
                    if case .live(let view) = try lookup(top.id, in: txn) { out.append(view) }
                    if let key = try walks.previous(top.walk) { heads.insert(try head(key, walk: top.walk)) }
                }
                return out
            }
        }
    }
}

/// A followed user's newest picture not yet taken into a feed page, and
/// the walk over that user's pictures.
private struct FeedHead: Comparable {
    let hlc: HLC
    let id: ObjectID
    let walk: Int

    static func < (a: FeedHead, b: FeedHead) -> Bool { (a.hlc, a.id) < (b.hlc, b.id) }
    static func == (a: FeedHead, b: FeedHead) -> Bool { a.hlc == b.hlc && a.id == b.id }
}
