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

/// A device of a user: `{"device", "name", "added", "added_time", "removed", "removed_time", "rights"}`.
public struct DeviceShape: Encodable, Sendable {
    let device: String
    let name: String?
    let added: UInt64
    let addedTime: String
    let removed: UInt64?
    let removedTime: String?
    let rights: UInt64

    enum CodingKeys: String, CodingKey {
        case device, name, added, addedTime = "added_time", removed, removedTime = "removed_time", rights
    }

    /// The shape of `d`.
    public init(_ d: DeviceView) {
        device = d.device.hex
        name = d.name
        added = d.addedHLC.rawValue
        addedTime = d.addedHLC.description
        removed = d.removedHLC?.rawValue
        removedTime = d.removedHLC?.description
        rights = d.rights
    }
}

/// A list of user keys (or any ids) in hex: `["…", …]`.
public struct KeyList: OperationResult {
    /// The keys.
    public let keys: [PublicKey]
    /// The `after` that reads the next page; nil on the last.
    public let nextPage: String?

    /// The list of `keys`, a page when `nextPage` is given.
    public init(_ keys: [PublicKey], nextPage: String? = nil) {
        self.keys = keys
        self.nextPage = nextPage
    }

    /// An array of hex strings.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.unkeyedContainer()
        for key in keys { try c.encode(key.hex) }
    }
}

extension PictureShape: SchemaDescribed {
    /// Every field is there; the content fields are null once purged.
    public static var schema: JSONSchema {
        .object([
            ("id", .hex32), ("owner", .hex32), ("caption", .nullable(.string)), ("mime", .nullable(.string)), ("blob", .nullable(.hex32)),
            ("size", .nullable(.integer)), ("width", .nullable(.integer)), ("height", .nullable(.integer)), ("hlc", .integer),
            ("time", .string), ("created_by", .hex32), ("content_purged", .boolean),
        ])
    }
}

extension ReferenceShape: SchemaDescribed {
    /// `picture` is null unless `status` is `picture`.
    public static var schema: JSONSchema {
        .object([("id", .hex32), ("status", .oneOfTexts(["picture", "removed", "unresolved"])), ("picture", .nullable(.ref("Picture")))])
    }
}

extension DeviceShape: SchemaDescribed {
    /// `removed` is null while the device is bound.
    public static var schema: JSONSchema {
        .object([
            ("device", .hex32), ("name", .nullable(.string)), ("added", .integer), ("added_time", .string), ("removed", .nullable(.integer)),
            ("removed_time", .nullable(.string)), ("rights", .integer),
        ])
    }
}

extension KeyList: SchemaDescribed {
    /// An array of hex keys.
    public static var schema: JSONSchema { .array(.hex32) }
}
