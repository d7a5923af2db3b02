import Chorus
import ChorusTestSupport
import Foundation
import Testing

/// The library's main calls, compiled against `import Chorus` alone and
/// run inside the test suite (the README's own example is
/// `Examples/ChorusApp`, which `Tools/test` builds and runs).
@Suite("Embedding the library", .closingNodes)
struct EmbeddingTests {
    @Test func theReadmeExampleRunsWithOnlyImportChorus() async throws {
        let root = NSTemporaryDirectory() + "chorus-embed-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        let shopStore = root + "/shop"
        let storeDirectory = root + "/alice"
        let photoData = Data([0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 7, count: 64))

        let (shop, network) = try await Node.createNetwork(at: shopStore)   // the network and its coin issuer, once
        opened(shop)
        let invite = network.invite                                          // share this string; never rebuild the network
        let bobNode = opened(try await Node.create(at: root + "/bob", deviceName: "laptop", network: try NetworkConfig(invite: invite)))
        let bob = bobNode.identity.user
        let node = opened(try await Node.create(at: storeDirectory, deviceName: "iPhone", network: try NetworkConfig(invite: invite)))  // or Node.open(at:)
        _ = await node.ingest(try bobNode.arrivals().map { $0.event.encoded() })  // Bob's device key, to seal the chat to him
        try await node.setProfile(.city("Lisbon"))                         // returns once durable
        let picture = try await node.addPicture(photoData, caption: "rooftop").object   // Data or [UInt8]
        try await node.follow(bob)
        let chat = try await node.createChat(title: "trip", members: [bob]).object   // sealed to the members' devices
        try await node.sendMessage(chat, text: "look", picture: picture)

        // A purchase the store delivers twice is credited once; the second
        // credit is stored and says why it took no effect.
        _ = await shop.ingest(try node.arrivals().map { $0.event.encoded() })
        let credit = try await shop.creditCoins(100, to: node.identity.user, receipt: "GPA.3372")
        let again = try await shop.creditCoins(100, to: node.identity.user, receipt: "GPA.3372")
        if case .noEffect(let why) = again.effect, why.code == "duplicate_receipt" { print("redelivered: \(why.detail)") }
        _ = await node.ingest(try shop.arrivals().map { $0.event.encoded() })

        let me = node.identity.user
        let profile = try node.profile(of: me)
        let page = try node.readableChatPage(chat, limit: 50)
        let balance = try node.balance(of: me)
        let digest = try node.digest()

        var rendered: [ReadableChatPage] = []
        func render(_ page: ReadableChatPage) { rendered.append(page) }
        for try await page in node.observe({ try $0.readableChatPage(chat, limit: 50) }) {
            render(page)
            break  // the first page is enough here
        }

        // Sync: one node serves, the other connects.
        let serving = try await bobNode.serve(port: 0, options: .patient(live: true))
        let report = try await node.sync(with: "127.0.0.1", port: serving.port, options: .patient(live: false))
        await serving.shutdown()

        #expect(profile.city == "Lisbon")
        #expect(rendered == [page])
        #expect(page.messages.first?.content.value?.text == "look")
        #expect(page.chat.title == .content("trip"))
        #expect(balance.total == 100)
        #expect(credit.isApplied && again.effect.code == "duplicate_receipt")
        #expect(report.complete)
        #expect(try bobNode.readableChatPage(chat, limit: 50).messages.first?.content.value?.text == "look")
        #expect(try bobNode.digest() == node.digest() && digest == node.digest())
        await node.close()
        await bobNode.close()
        await shop.close()
    }
}
