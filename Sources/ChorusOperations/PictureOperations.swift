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
