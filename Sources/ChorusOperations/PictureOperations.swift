import ChorusCrypto
import ChorusEvents
import ChorusNode

/// Caption, move or delete one of this user's pictures (Specs/api.md §5).
/// `POST /v1/pictures/{id}/caption`, `POST /v1/pictures/{id}/move`,
/// `DELETE /v1/pictures/{id}`; `chorus picture caption|move|delete`.
public struct ChangePicture: NodeOperation {
    /// What changes.
    public enum Change: Sendable {
        /// A new caption.
        case caption(String)
        /// A new place in the gallery.
        case move(GalleryPlacement)
        /// Deleted (final): its bytes are purged, and every projection that referred to it forgets it.
        case delete
    }

    /// `{"picture": …}`.
    public struct Fields: Encodable, Sendable {
        /// The picture id in hex.
        public let picture: String
    }

    /// The picture.
    public let picture: PictureID
    /// The change.
    public let change: Change

    /// `change` of `picture`.
    public init(_ picture: PictureID, _ change: Change) {
        self.picture = picture
        self.change = change
    }

    /// Signs and commits the event.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        let fields = Fields(picture: picture.hex)
        switch change {
        case .caption(let text):
            return MutationReport(fields, try await node.captionPicture(picture, text), summary: "Captioned picture \(picture.short)")
        case .move(let placement):
            return MutationReport(fields, try await node.movePicture(picture, to: placement), summary: "Moved picture \(picture.short)")
        case .delete:
            return MutationReport(fields, try await node.deletePicture(picture), summary: "Deleted picture \(picture.short)")
        }
    }
}

/// Store an image as a blob and create a picture owned by this user
/// (Specs/events.md §6.2). `POST /v1/pictures` (the body is the image);
/// `chorus picture add`.
public struct AddPicture: NodeOperation {
    /// `{"picture", "size"}`: the new picture's id and the image's length.
    public struct Fields: Encodable, Sendable {
        /// The picture id in hex.
        public let picture: String
        /// The image's bytes.
        public let size: Int
    }

    /// The image (JPEG, PNG, GIF, WebP, HEIC or AVIF; at most the node's blob limit).
    public let image: [UInt8]
    /// The MIME type, or nil to recognise it from the first bytes.
    public let mime: String?
    /// A caption.
    public let caption: String?

    /// A picture of `image`.
    public init(_ image: [UInt8], mime: String? = nil, caption: String? = nil) {
        self.image = image
        self.mime = mime
        self.caption = caption
    }

    /// Stores the blob and signs the creation.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        let added = try await node.addPicture(image, mime: mime, caption: caption)
        return MutationReport(
            Fields(picture: added.object.hex, size: image.count), added, summary: "Added picture \(added.object.short) (\(image.count) bytes)")
    }
}

extension ChangePicture.Fields: ReportFields {
    /// `{"picture"}`.
    public static var fields: [(String, JSONSchema)] { [("picture", .hex32)] }
}

extension AddPicture.Fields: ReportFields {
    /// `{"picture", "size"}`.
    public static var fields: [(String, JSONSchema)] { [("picture", .hex32), ("size", .integer)] }
}
