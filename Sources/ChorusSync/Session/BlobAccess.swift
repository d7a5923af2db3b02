import ChorusBlobs
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusStorage

/// Blob bookkeeping for sync, through the projections' public blob
/// queries (`wantedBlobs`, `isBlobReferenced`: Specs/projections.md §4,
/// the `blobRef` table, present exactly for live pictures whose blob is
/// known). A deleted picture has no reference, so its blob is never wanted,
/// served or stored.
struct BlobAccess: Sendable {
    let node: Node

    init(node: Node) throws {
        self.node = node
    }

    /// This node's blob serial (Specs/sync.md §4.4).
    func serial() throws -> UInt64 { try node.blobs.serial() }

    /// Blobs that live pictures and messages reference and this node lacks,
    /// with the size a picture declares (`Projections.wantedBlobs`: its
    /// cost follows the blobs lacked, not the pictures held).
    func missing() throws -> [(hash: Hash32, size: UInt64?)] {
        try node.projections.wantedBlobs().map { hash, object in
            if case .live(let view) = try node.projections.picture(PictureID(object)) { return (hash, view.size) }
            return (hash, nil)
        }
    }

    /// Whether a live picture references `hash`, in `txn`.
    func referenced(_ hash: Hash32, in txn: Transaction) throws -> Bool {
        try node.projections.isBlobReferenced(hash, in: txn)
    }

    /// The bytes of a blob this node may serve: present and referenced by a
    /// live picture.
    func servable(_ hash: Hash32) throws -> [UInt8]? {
        try node.log.env.read { txn in
            guard try referenced(hash, in: txn) else { return nil }
            return try node.blobs.read(hash, in: txn)
        }
    }
}
