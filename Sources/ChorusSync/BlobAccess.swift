import ChorusBlobs
import ChorusCrypto
import ChorusNode
import ChorusProjections
import ChorusStorage

/// Blob bookkeeping for sync, read from the projections' `blobRef` table
/// (Specs/projections.md §4: key 0x35 ‖ blob hash ‖ picture id, present
/// exactly for live pictures whose blob is known). A deleted picture has no
/// entry, so its blob is never wanted, served or stored.
struct BlobAccess: Sendable {
    static let blobRefPrefix: UInt8 = 0x35

    let node: Node
    let state: Database

    init(node: Node) throws {
        self.node = node
        state = try node.log.env.openDatabase("state", create: false)
    }

    /// Blobs that live pictures reference and this node lacks, with the size
    /// the picture declares.
    func missing() throws -> [(hash: Hash32, size: UInt64?)] {
        var refs: [(Hash32, ObjectID)] = []
        try node.log.env.read { txn in
            var last: Hash32? = nil
            try txn.scan(state, prefix: [Self.blobRefPrefix]) { key, _ in
                guard key.count == 65, let hash = Bytes32(key[1..<33]), let picture = Bytes32(key[33..<65]) else { return true }
                if hash != last, try !node.blobs.contains(hash, in: txn) { refs.append((hash, picture)) }
                last = hash
                return true
            }
        }
        return try refs.map { hash, picture in
            if case .live(let view) = try node.projections.picture(picture) { return (hash, view.size) }
            return (hash, nil)
        }
    }

    /// Whether a live picture references `hash`, in `txn`.
    func referenced(_ hash: Hash32, in txn: Transaction) throws -> Bool {
        var found = false
        try txn.scan(state, prefix: [Self.blobRefPrefix] + hash.bytes) { _, _ in
            found = true
            return false
        }
        return found
    }

    /// The bytes of a blob this node may serve: present and referenced by a
    /// live picture.
    func servable(_ hash: Hash32) throws -> [UInt8]? {
        try node.log.env.read { txn in
            guard try referenced(hash, in: txn) else { return nil }
            return try node.blobs.read(hash, in: txn)
        }
    }

    /// Stores a verified blob unless no live picture references it any more
    /// (deleted meanwhile). Returns whether it was stored.
    func store(_ bytes: [UInt8], hash: Hash32) throws -> Bool {
        try node.log.env.write { txn in
            guard try referenced(hash, in: txn) else { return false }
            if try node.blobs.contains(hash, in: txn) { return false }
            try node.blobs.put(bytes, in: txn)
            return true
        }
    }
}
