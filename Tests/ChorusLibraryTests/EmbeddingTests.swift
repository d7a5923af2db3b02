import Chorus
import Foundation
import Testing

/// The README's embedding example, compiled against `import Chorus` alone
/// and run: if this stops compiling, the README is wrong.
@Suite("Embedding the library (README)")
struct EmbeddingTests {
    @Test func theReadmeExampleRunsWithOnlyImportChorus() async throws {
        let root = NSTemporaryDirectory() + "chorus-embed-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        // One network, created once and shared by every node of it.
        let shopStore = root + "/shop"
        await (try await Node.create(at: shopStore)).close()
        let shopIssuerKey = try Node.createIssuer(at: shopStore)
        let network = NetworkConfig(issuers: [shopIssuerKey])
        let bobNode = try await Node.create(at: root + "/bob", deviceName: "laptop", network: network)
        let bob = bobNode.identity.user
        let storeDirectory = root + "/alice"
        let jpegBytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 7, count: 64)

        // --- README: Embedding the library ---
        let node = try await Node.create(at: storeDirectory, deviceName: "iPhone", network: network)  // or Node.open(at:)
        _ = await node.ingest(try bobNode.arrivals().map { $0.event.encoded() })  // Bob's device key, to seal the chat to him
        try await node.setProfile(.city, .text("Lisbon"))
        let picture = try await node.addPicture(jpegBytes, caption: "rooftop").object
        try await node.follow(bob)
        let chat = try await node.createChat(title: "trip", members: [bob]).object
        try await node.sendMessage(chat, text: "look", picture: picture)

        let me = node.identity.user
        let profile = try node.projections.profile(me)
        let page = try node.readableChatPage(chat, limit: 50)
        let balance = try node.projections.balance(of: me)
        let digest = try node.projections.digest()

        var rendered: [ReadableChatPage] = []
        func render(_ page: ReadableChatPage) { rendered.append(page) }
        for try await page in node.observe({ try $0.readableChatPage(chat, limit: 50) }) {
            render(page)
            break  // (not in the README: the test stops after the first page)
        }

        // Sync: one node serves, the other connects.
        let serving = try await bobNode.serve(port: 0)
        let report = try await node.sync(with: "127.0.0.1", port: serving.port)
        await serving.shutdown()
        // --- end of the README example ---

        #expect(profile.field("city") == .text("Lisbon"))
        #expect(rendered == [page])
        #expect(page.messages.first?.content.value?.text == "look")
        #expect(page.chat.title == .content("trip"))
        #expect(balance.total == 0)
        #expect(report.complete)
        #expect(try bobNode.readableChatPage(chat, limit: 50).messages.first?.content.value?.text == "look")
        #expect(try bobNode.projections.digest() == node.projections.digest() && digest == node.projections.digest())
        await node.close()
        await bobNode.close()
    }
}
