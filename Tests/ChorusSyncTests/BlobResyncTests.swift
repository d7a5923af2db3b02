import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

@Suite("Re-syncs with blobs neither side holds (Specs/sync.md §4.4)")
struct BlobResyncTests {
    @Test("1,001 pictures whose bytes neither side holds: a re-sync asks none and stays under 1 KB each way; once the relay stores them, the next sync fetches them")
    func blobsAPeerLackedAreNotAskedAgainUntilItStoresANewBlob() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let author = try await makeNode(dir, "author", network: net)
        let relay = try await makeNode(dir, "relay", network: net)
        let reader = try await makeNode(dir, "reader", network: net)
        // Pictures whose bytes only the author holds; the relay gets their
        // events without the bytes, as an export and import carries them.
        for i in 0..<1001 {
            _ = try await author.addPicture([0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: UInt8(i % 256), count: 200) + [UInt8(i / 256)], caption: "p\(i)").object
        }
        _ = await relay.ingest(try author.arrivals().map { $0.event.encoded() })

        let (first, _) = try await syncPair(reader, relay)
        #expect(first.complete)
        #expect(first.blobsRequested == 1001)
        #expect(first.blobsReceived == 0)

        // In sync, and the relay stored no blob since: nothing is asked, and
        // the whole session stays under a kilobyte each way.
        let (second, relaySide) = try await syncPair(reader, relay)
        #expect(second.complete)
        #expect(second.blobsRequested == 0)
        #expect(second.bytesSent < 1024 && second.bytesReceived < 1024, "\(second.bytesSent) sent, \(second.bytesReceived) received")
        #expect(relaySide.blobsSent == 0)

        // The relay fetches the bytes from the author: its blob serial moves,
        // so the reader asks again and gets them.
        let (relayFetch, _) = try await syncPair(relay, author)
        #expect(relayFetch.blobsReceived == 1001)
        let (third, _) = try await syncPair(reader, relay)
        #expect(third.blobsRequested == 1001)
        #expect(third.blobsReceived == 1001)
        let (fourth, _) = try await syncPair(reader, relay)
        #expect(fourth.blobsRequested == 0)
        for node in [author, relay, reader] { await node.close() }
    }
}
