import ChorusCrypto
import ChorusNode
import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@testable import ChorusProjections

/// The `blobWanted` index entries (Specs/projections.md §9.1) that sync's
/// blob listing reads: present exactly for the blobs a live object
/// references and the store lacks, however the blob arrives or the
/// reference goes.
@Suite("Node: wanted blobs", .closingNodes)
struct WantedBlobTests {
    /// The hashes the index holds, read raw (the listing checks each entry
    /// again as it reads it, so it would hide a stale one).
    func indexed(_ node: Node) throws -> Set<Hash32> {
        try node.log.env.read { txn in
            var out: Set<Hash32> = []
            try txn.scan(node.projections.index, prefix: [IndexTable.blobWanted.rawValue]) { key, _ in
                out.insert(try #require(Bytes32(key.dropFirst())))
                return true
            }
            return out
        }
    }

    /// A node that posts pictures and one that receives their events, in one network.
    func nodes(in tmp: TempDir) async throws -> (author: Node, reader: Node) {
        let network = NetworkConfig(networkKey: Random.bytes32())
        return (opened(try await Node.create(at: tmp.store("author"), network: network)), opened(try await Node.create(at: tmp.store("reader"), network: network)))
    }

    /// The two nodes, the author having posted a picture of `bytes` and the
    /// reader holding its events without the bytes (as sync's event rounds
    /// leave them, before its blob round).
    func readerLacking(_ bytes: [UInt8], in tmp: TempDir) async throws -> (author: Node, reader: Node) {
        let (author, reader) = try await nodes(in: tmp)
        _ = try await author.addPicture(bytes, mime: "image/png")
        let events = try author.arrivals().map(\.event)
        #expect(await reader.ingest(events: events).accepted == events.count)
        return (author, reader)
    }

    func bytes(_ seed: UInt8) -> [UInt8] {
        [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + (0..<4_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    @Test func aBlobIsWantedFromItsPictureUntilStoredOrUnreferenced() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let (author, reader) = try await nodes(in: tmp)
        let (kept, gone) = (bytes(1), bytes(2))
        let keptPicture = try await author.addPicture(kept, mime: "image/png").object
        let gonePicture = try await author.addPicture(gone, mime: "image/png").object
        // Stored with its picture, in the same commit: never wanted.
        #expect(try indexed(author).isEmpty)

        // The reader gets the pictures without their bytes (as sync's event
        // rounds leave them, before its blob round).
        let events = try author.arrivals().map(\.event)
        #expect(await reader.ingest(events: events).accepted == events.count)
        let (keptHash, goneHash) = (Blake2b.hash256(kept), Blake2b.hash256(gone))
        #expect(try indexed(reader) == [keptHash, goneHash])
        #expect(Set(try reader.projections.wantedBlobs().map(\.blob)) == [keptHash, goneHash])
        #expect(Set(try reader.projections.wantedBlobs().map(\.object)) == [keptPicture.raw, gonePicture.raw])

        // Stored as sync stores it: no longer wanted.
        #expect(try await reader.storeReceivedBlobs([(keptHash, kept)]) == 1)
        #expect(try indexed(reader) == [goneHash])

        // Its picture deleted before the bytes came: nothing references them.
        _ = try await author.deletePicture(gonePicture)
        let deletion = try #require(try author.arrivals().last?.event)
        #expect(await reader.ingest(events: [deletion]).accepted == 1)
        #expect(try indexed(reader).isEmpty)
        #expect(try reader.projections.wantedBlobs().isEmpty)

        // A rebuild finds the same.
        try await reader.rebuildProjections()
        #expect(try indexed(reader).isEmpty)
        await author.close()
        await reader.close()
    }

    @Test func aBlobStoredWithALocalPictureIsNoLongerWanted() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let shared = bytes(4)
        let (author, reader) = try await readerLacking(shared, in: tmp)
        #expect(try indexed(reader) == [Blake2b.hash256(shared)])
        // The reader posts the same bytes itself: stored with its own picture.
        _ = try await reader.addPicture(shared, mime: "image/png")
        #expect(try indexed(reader).isEmpty)
        #expect(try reader.projections.wantedBlobs().isEmpty)
        await author.close()
        await reader.close()
    }

    @Test func aRebuildListsTheBlobsItsPicturesLack() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let picture = bytes(3)
        let (author, reader) = try await readerLacking(picture, in: tmp)
        try await reader.rebuildProjections()
        #expect(try indexed(reader) == [Blake2b.hash256(picture)])
        await author.close()
        await reader.close()
    }
}
