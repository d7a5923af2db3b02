import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections

/// The JSON shapes that answers share (Specs/api.md §5), as `Encodable`
/// types whose fields encode in the documented order.

/// A picture: `{"id", "owner", "caption", "mime", "blob", "size", "width",
/// "height", "hlc", "time", "created_by", "content_purged"}`.
public struct PictureShape: Encodable, Sendable {
    let id: String
    let owner: String
    let caption: String?
    let mime: String?
    let blob: String?
    let size: UInt64?
    let width: UInt64?
    let height: UInt64?
    let hlc: UInt64
    let time: String
    let createdBy: String
    let contentPurged: Bool

    enum CodingKeys: String, CodingKey {
        case id, owner, caption, mime, blob, size, width, height, hlc, time
        case createdBy = "created_by", contentPurged = "content_purged"
    }

    /// The shape of `p`.
    public init(_ p: PictureView) {
        id = p.id.hex
        owner = p.owner.hex
        caption = p.caption
        mime = p.mime
        blob = p.blob?.hex
        size = p.size
        width = p.width
        height = p.height
        hlc = p.hlc.rawValue
        time = p.hlc.description
        createdBy = p.createdBy.hex
        contentPurged = p.contentPurged
    }
}

/// A reference to a picture: `{"id", "status": "picture"|"removed"|"unresolved", "picture": PICTURE|null}`.
public struct ReferenceShape: Encodable, Sendable {
    let id: String
    let status: String
    let picture: PictureShape?

    /// The shape of `ref`.
    public init(_ ref: PictureReference) {
        switch ref {
        case .picture(let p): (id, status, picture) = (p.id.hex, "picture", PictureShape(p))
        case .removed(let id): (self.id, status, picture) = (id.hex, "removed", nil)
        case .unresolved(let id): (self.id, status, picture) = (id.hex, "unresolved", nil)
        }
    }
}

/// A device of a user: `{"device", "name", "added", "removed", "rights"}`.
public struct DeviceShape: Encodable, Sendable {
    let device: String
    let name: String?
    let added: UInt64
    let removed: UInt64?
    let rights: UInt64

    /// The shape of `d`.
    public init(_ d: DeviceView) {
        device = d.device.hex
        name = d.name
        added = d.addedHLC.rawValue
        removed = d.removedHLC?.rawValue
        rights = d.rights
    }
}

/// A list of user keys (or any ids) in hex: `["…", …]`.
public struct KeyList: OperationResult {
    /// The keys.
    public let keys: [PublicKey]

    /// The list of `keys`.
    public init(_ keys: [PublicKey]) { self.keys = keys }

    /// An array of hex strings.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.unkeyedContainer()
        for key in keys { try c.encode(key.hex) }
    }
}
