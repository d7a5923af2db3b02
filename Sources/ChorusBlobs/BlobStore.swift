import ChorusCrypto
import ChorusStorage

/// A blob (a picture's bytes) the store refuses or finds damaged.
public enum BlobError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A blob over the size limit: `blob_too_large`.
    case tooLarge(size: Int, limit: Int)
    /// A blob of no bytes: `blob_empty`.
    case empty
    /// A stored blob whose bytes no longer match its hash: `blob_damaged`.
    case damaged(hash: Hash32, reason: String)

    public var description: String {
        switch self {
        case .tooLarge(let size, let limit):
            "the blob is \(size) bytes; blobs may be at most \(limit) bytes (a picture over the limit must be shrunk or recompressed)"
        case .empty: "the file is empty"
        case .damaged(let hash, let reason): "blob \(hash.hex) is damaged: \(reason)"
        }
    }
}

/// Content-addressed blobs (picture bytes) inside the node's LMDB
/// environment, keyed by BLAKE2b-256 of their bytes (Specs/storage.md).
/// A blob is split into chunks so a large file never needs one huge value:
/// key `hash || u32 chunk index` holds the chunk, key `hash` holds the
/// total size as a u64.
public struct BlobStore: Sendable {
    public static let chunkSize = 64 * 1024
    public static let databaseNames = ["blobs"]

    public let env: Environment
    let blobs: Database

    public init(env: Environment) throws {
        self.env = env
        blobs = try env.openDatabase("blobs")
    }

    /// Stores `bytes` inside the caller's write transaction and returns its
    /// hash. Storing a blob that is already present changes nothing.
    @discardableResult
    public func put(_ bytes: [UInt8], in txn: Transaction) throws -> Hash32 {
        let hash = Blake2b.hash256(bytes)
        try put(bytes, checkedAgainst: hash, in: txn)
        return hash
    }

    /// `put` for bytes the caller has already checked against `hash` (a
    /// sync receiver checks every blob it assembles, Specs/sync.md §4.4):
    /// they are not hashed again, inside the writer's transaction.
    public func put(_ bytes: [UInt8], checkedAgainst hash: Hash32, in txn: Transaction) throws {
        guard !bytes.isEmpty else { throw BlobError.empty }
        if try txn.get(blobs, hash.bytes) != nil { return }
        var index: UInt32 = 0
        var start = 0
        try bytes.withUnsafeBytes { raw in
            while start < raw.count {
                let end = min(raw.count, start + Self.chunkSize)
                try Self.chunkKey(hash, index).withUnsafeBytes { key in
                    try txn.put(blobs, key, UnsafeRawBufferPointer(rebasing: raw[start..<end]))
                }
                index += 1
                start = end
            }
        }
        try txn.put(blobs, hash.bytes, Self.u64(UInt64(bytes.count)))
        try txn.put(blobs, Self.serialKey, Self.u64(try serial(in: txn) + 1))
    }

    /// The key of the blob serial: 6 bytes, so it is never a hash (32) or a
    /// chunk key (36).
    static let serialKey = Array("serial".utf8)

    /// How many blobs this store has ever stored: it grows with each new
    /// blob and never shrinks, so a peer that saw the same serial knows no
    /// blob arrived since (Specs/sync.md §4.4).
    public func serial(in txn: Transaction) throws -> UInt64 {
        guard let raw = try txn.get(blobs, Self.serialKey), raw.count == 8 else { return 0 }
        return raw.reduce(0) { $0 << 8 | UInt64($1) }
    }

    public func serial() throws -> UInt64 { try env.read { try serial(in: $0) } }

    public func contains(_ hash: Hash32, in txn: Transaction) throws -> Bool {
        try txn.get(blobs, hash.bytes) != nil
    }

    public func size(of hash: Hash32, in txn: Transaction) throws -> UInt64? {
        guard let raw = try txn.get(blobs, hash.bytes), raw.count == 8 else { return nil }
        return raw.reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// Reads a whole blob and checks it against its hash.
    public func read(_ hash: Hash32, in txn: Transaction) throws -> [UInt8]? {
        guard let size = try size(of: hash, in: txn) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(Int(size))
        var index: UInt32 = 0
        while out.count < Int(size) {
            guard let chunk = try txn.get(blobs, Self.chunkKey(hash, index)), !chunk.isEmpty else {
                throw BlobError.damaged(hash: hash, reason: "chunk \(index) missing")
            }
            out += chunk
            index += 1
        }
        guard out.count == Int(size), Blake2b.hash256(out) == hash else {
            throw BlobError.damaged(hash: hash, reason: "bytes do not match the hash")
        }
        return out
    }

    public func read(_ hash: Hash32) throws -> [UInt8]? { try env.read { try read(hash, in: $0) } }

    /// Deletes a blob's bytes; returns whether it was present.
    @discardableResult
    public func delete(_ hash: Hash32, in txn: Transaction) throws -> Bool {
        try txn.deletePrefix(blobs, hash.bytes) > 0
    }

    /// The hashes of every stored blob with its size.
    public func all() throws -> [(hash: Hash32, size: UInt64)] {
        try env.read { txn in
            var out: [(Hash32, UInt64)] = []
            try txn.scan(blobs) { key, value in
                if key.count == 32, let hash = Bytes32(key), value.count == 8 {
                    out.append((hash, value.reduce(0) { $0 << 8 | UInt64($1) }))
                }
                return true
            }
            return out
        }
    }

    /// Bytes used by the blob database's pages.
    public func databaseSize() throws -> Int { try env.pageCount(of: blobs) }

    static func chunkKey(_ hash: Hash32, _ index: UInt32) -> [UInt8] {
        hash.bytes + [UInt8(index >> 24), UInt8(truncatingIfNeeded: index >> 16), UInt8(truncatingIfNeeded: index >> 8),
            UInt8(truncatingIfNeeded: index)]
    }

    static func u64(_ n: UInt64) -> [UInt8] { bigEndianBytes(n) }
}

extension BlobError {
    /// A stable, machine-readable name of the error, in snake case.
    public var code: String {
        switch self {
        case .tooLarge: "blob_too_large"
        case .empty: "blob_empty"
        case .damaged: "blob_damaged"
        }
    }
}
