import ChorusCrypto
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Specs/encryption.md §6 rule 5 through sync: a member whose device key the
/// chat's creator learns only from the member's own sync reads the chat
/// after that one `sync`, and a live session delivers the key as soon as it
/// is wrapped.
@Suite("Chat keys reach a new member in one sync", .closingNodes)
struct KeyDeliveryTests {
    @Test("a member added before the creator knew its device reads the chat after one sync")
    func oneSyncIsEnough() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        // Alice knows Bob's user, not his device: the first epoch is wrapped to her devices only.
        let chat = try await alice.createChat(title: "Rooftops", members: [bob.identity.user]).object
        _ = try await alice.sendMessage(chat, text: "before Bob's device was known")
        let server = try SyncServer(node: alice)
        let listener = try await server.listen(host: "127.0.0.1", port: 0)
        let report = try await bounded(.seconds(60), "bob's one sync") {
            try await SyncNetwork.sync(bob, host: "127.0.0.1", port: listener.port)
        }
        #expect(report.complete && report.sessions >= 2, "the key came in a follow-up session: \(report.sessions) sessions")
        let view = try #require(try bob.projections.chatView(chat))
        #expect(try bob.readableChat(view).title?.value == "Rooftops")
        let page = try bob.readableChatPage(chat)
        #expect(page.messages.map { $0.content.value?.text } == ["before Bob's device was known"])
        await listener.shutdown()
        await server.shutdown()
        await alice.close()
        await bob.close()
    }

    @Test("in a live session the key is wrapped and delivered while connected")
    func liveDelivery() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let chat = try await alice.createChat(title: "Live", members: [bob.identity.user]).object
        let server = try SyncServer(node: alice)
        let listener = try await server.listen(host: "127.0.0.1", port: 0)
        let live = Task { try await SyncNetwork.sync(bob, host: "127.0.0.1", port: listener.port, options: SyncOptions(live: true)) }
        let readable = try await eventually(.seconds(60)) {
            guard let view = try bob.projections.chatView(chat) else { return false }
            return try bob.readableChat(view).title?.value == "Live"
        }
        #expect(readable, "the title never became readable during the live session")
        live.cancel()
        _ = try? await bounded(.seconds(60), "live end") { try await live.value }
        await listener.shutdown()
        await server.shutdown()
        await alice.close()
        await bob.close()
    }
}
