import ChorusCrypto

/// The fetcher's side of blobs (Specs/sync.md §4.4): which blobs were asked
/// for, the one being assembled from its chunks, which the peer lacked, and
/// what was remembered about the peer's blob serial. Pure state: the session
/// feeds it the messages and stores the blobs it completes.
package struct BlobFetchState: Sendable {
    /// Asked for and not yet received, with the size the picture declares.
    private var wanted: [Hash32: UInt64?] = [:]
    /// The peer lacked these in this session (`blobMissing`, or left at `blobEnd`).
    package private(set) var givenUp: Set<Hash32> = []
    /// Not asked for in this session: the peer lacked them at the same serial.
    package private(set) var skipped: Set<Hash32> = []
    private var assembly: (hash: Hash32, total: UInt64, bytes: [UInt8])? = nil
    /// The peer's blob serial from this session.
    package private(set) var peerSerial: UInt64? = nil
    /// From the last session: the peer's serial then and the blobs it lacked.
    let remembered: (serial: UInt64, lacked: Set<Hash32>)?

    /// Starts a session's blob state from what the peer record remembers: the
    /// peer's blob serial at the last complete session and the blobs it lacked
    /// then (nil: nothing remembered).
    package init(remembered: (serial: UInt64, lacked: Set<Hash32>)?) { self.remembered = remembered }

    /// The blobs the peer lacked in this session or was not asked for,
    /// remembered with its serial for the next session.
    package var lacked: Set<Hash32> { skipped.union(givenUp) }

    /// Records the peer's `blobSerial` message (Specs/sync.md §4.4). Throws
    /// `SyncError.unexpected` for a second one in the same session.
    package mutating func serial(_ serial: UInt64) throws(SyncError) {
        guard peerSerial == nil else { throw .unexpected("a second blob serial") }
        peerSerial = serial
    }

    /// Which of the blobs this node lacks to ask for: none the peer lacked
    /// earlier in this session, and none it lacked last time if its serial
    /// has not moved since (it stored no blob: asking would cost a want and
    /// a miss each).
    package mutating func request(_ missing: [(hash: Hash32, size: UInt64?)]) -> [Hash32] {
        var ask = missing.filter { !givenUp.contains($0.hash) }
        if let remembered, let peerSerial, peerSerial == remembered.serial {
            let known = ask.filter { remembered.lacked.contains($0.hash) }
            skipped.formUnion(known.map(\.hash))
            ask.removeAll { remembered.lacked.contains($0.hash) }
        }
        for m in ask { wanted[m.hash] = m.size }
        return ask.map(\.hash)
    }

    /// One chunk: returns the blob's bytes once its last chunk arrived and
    /// they match its hash. Chunks arrive in order, one blob at a time, within
    /// the size the picture declares and `limit`.
    package mutating func chunk(hash: Hash32, offset: UInt64, total: UInt64, bytes: [UInt8], limit: UInt64) throws(SyncError) -> [UInt8]? {
        guard let declared = wanted[hash] else { throw .badBlob("\(hash.short) was not requested") }
        if offset == 0 {
            guard total > 0, total <= limit else { throw .badBlob("\(hash.short) is \(total) bytes (limit \(limit))") }
            if let declared, declared != total { throw .badBlob("\(hash.short) is \(total) bytes, the picture says \(declared)") }
            assembly = (hash, total, [])
            assembly?.bytes.reserveCapacity(Int(total))
        }
        guard var a = assembly, a.hash == hash, a.total == total, UInt64(a.bytes.count) == offset,
            offset + UInt64(bytes.count) <= total
        else { throw .badBlob("chunk of \(hash.short) at \(offset) out of order or beyond its size") }
        assembly = nil
        a.bytes += bytes
        if UInt64(a.bytes.count) < total {
            assembly = a
            return nil
        }
        guard Blake2b.hash256(a.bytes) == hash else { throw .badBlob("bytes of \(hash.short) do not match its hash") }
        wanted.removeValue(forKey: hash)
        return a.bytes
    }

    /// `blobMissing`: the peer does not hold this one.
    package mutating func missing(_ hash: Hash32) throws(SyncError) {
        guard wanted.removeValue(forKey: hash) != nil else { throw .badBlob("\(hash.short) was not requested") }
        givenUp.insert(hash)
        if assembly?.hash == hash { assembly = nil }
    }

    /// `blobEnd`: whatever was not sent, the peer lacks.
    package mutating func end() {
        assembly = nil
        givenUp.formUnion(wanted.keys)
        wanted = [:]
    }
}
