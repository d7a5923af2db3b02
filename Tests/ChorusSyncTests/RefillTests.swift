import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation
import Testing

@Suite("Payload refill", .closingNodes)
struct RefillTests {
    @Test("a node holding a picture purged but not deleted gets its payload and blob back from a peer")
    func refillsPurgedPayload() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let picture = try await a.addPicture(pictureBytes(5, size: 20_000), mime: "image/png", caption: "kept").object
        _ = try await a.setProfile(.name, .text("Alice"))
        // B receives A's log with the picture's creation stripped of its
        // payload (as a relay or a lost deletion would leave it).
        let all = try a.arrivals().map(\.event)
        let creation = try #require(all.first { $0.kind == .pictureCreated })
        let stripped = all.map { $0.id == creation.id ? $0.purged() : $0 }
        let ingested = await b.ingest(events: stripped)
        #expect(ingested.accepted == all.count)
        #expect(try b.event(creation.id)?.event.payloadBytes == nil)
        #expect(try b.projections.eventsMissingPayload() == [creation.id])
        try await b.rebuildProjections()
        #expect(try b.projections.eventsMissingPayload() == [creation.id])
        #expect(try digest(a) != digest(b))

        let (ra, rb) = try await syncPair(a, b)
        #expect(ra.complete && rb.complete)
        #expect(rb.payloadsRefilled == 1 && rb.duplicatesReceived == 0 && rb.eventsReceived == 0)
        #expect(ra.eventsSent == 1)
        #expect(try b.event(creation.id)?.event.payloadBytes == creation.payloadBytes)
        #expect(try b.projections.eventsMissingPayload().isEmpty)
        #expect(rb.blobsReceived == 1)
        #expect(try b.blobs.read(Blake2b.hash256(pictureBytes(5, size: 20_000))) == pictureBytes(5, size: 20_000))
        if case .live(let view) = try b.projections.picture(picture) { #expect(view.caption == "kept") } else {
            Issue.record("the picture is not live on B after the refill")
        }
        #expect(try feedHeads(a) == feedHeads(b))
        #expect(try digest(a) == digest(b))
        #expect(try b.log.integrityProblems().isEmpty)

        // Nothing left to refill: the next sync asks for nothing.
        let (again, _) = try await syncPair(a, b)
        #expect(again.complete && again.eventsSent == 0 && again.eventsReceived == 0 && again.payloadsRefilled == 0)
        await a.close()
        await b.close()
    }

    @Test("a message whose send arrived stripped is listed and refilled; a deleted one is not listed")
    func refillsStrippedMessage() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let chat = try await a.createChat(title: "notes").object
        let kept = try await a.sendMessage(chat, text: "kept").object
        let gone = try await a.sendMessage(chat, text: "gone").object
        _ = try await a.deleteMessage(gone)
        let all = try a.arrivals().map(\.event)
        // A message's id is its send's event id.
        let keptSend = try #require(all.first { $0.id == kept.raw })
        let goneSend = try #require(all.first { $0.id == gone.raw })
        #expect(try a.event(goneSend.id)?.event.payloadBytes == nil)
        let stripped = all.map { $0.kind == .messageSent ? $0.purged() : $0 }
        #expect(await b.ingest(events: stripped).accepted == all.count)
        // The deleted message's payload is purged by its deletion: nothing to refill.
        #expect(try b.projections.eventsMissingPayload() == [keptSend.id])
        // A rebuild (the bulk fold, Specs/projections.md §9.2) lists the same.
        try await b.rebuildProjections()
        #expect(try b.projections.eventsMissingPayload() == [keptSend.id])

        let (_, rb) = try await syncPair(a, b)
        #expect(rb.complete && rb.payloadsRefilled == 1)
        #expect(try b.projections.eventsMissingPayload().isEmpty)
        #expect(try digest(a) == digest(b))
        await a.close()
        await b.close()
    }

    @Test("a peer that lacks the payload too answers with nothing; the sync still completes")
    func refillFromPeerWithoutPayload() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let c = try await makeNode(dir, "c", network: net)
        _ = try await a.addPicture(pictureBytes(6), mime: "image/png").object
        let all = try a.arrivals().map(\.event)
        let stripped = all.map { $0.kind == .pictureCreated ? $0.purged() : $0 }
        #expect(await b.ingest(events: stripped).accepted == all.count)
        #expect(await c.ingest(events: stripped).accepted == all.count)
        let (rb, rc) = try await syncPair(b, c)
        #expect(rb.complete && rc.complete && rb.payloadsRefilled == 0 && rc.payloadsRefilled == 0)
        #expect(try b.projections.eventsMissingPayload().count == 1)
        // C then gets it from A, and B from C.
        let (_, fromA) = try await syncPair(a, c)
        #expect(fromA.payloadsRefilled == 1)
        let (fromC, _) = try await syncPair(b, c)
        #expect(fromC.payloadsRefilled == 1)
        #expect(try digest(a) == digest(b) && digest(b) == digest(c))
        await a.close()
        await b.close()
        await c.close()
    }
}
