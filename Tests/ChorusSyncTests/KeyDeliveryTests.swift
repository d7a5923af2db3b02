import ChorusCrypto
import ChorusEvents
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
        let server = try SyncServer(node: alice, options: .patient)
        let listener = try await server.listen(host: "127.0.0.1", port: 0)
        let report = try await bounded(.seconds(120), "bob's one sync") {
            try await SyncNetwork.sync(bob, host: "127.0.0.1", port: listener.port, options: .patient)
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

    @Test("a message sealed under an older epoch after a member joined entitles the member to that epoch, shared when the message arrives")
    func aLateMessageUnderAnOlderEpoch() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let yann = try await makeNode(dir, "yann", network: net)
        let xia = try await makeNode(dir, "xia", network: net)
        // Everyone's devices and keys known to Alice, and Alice's to everyone.
        for other in [bob, yann, xia] { try await syncPair(alice, other) }
        let chat = try await alice.createChat(title: "Epochs", members: [bob.identity.user, yann.identity.user]).object
        for k in 0..<12 { _ = try await alice.sendMessage(chat, text: "first epoch \(k)") }
        try await syncPair(alice, bob)
        let first = try #require(try bob.projections.epochs(of: chat.raw).last?.epoch)
        // Alice removes Yann and writes under a new epoch, then adds Xia (who gets that new one, the epoch current at her joining).
        _ = try await alice.removeChatMember(chat, yann.identity.user)
        _ = try await alice.sendMessage(chat, text: "second epoch")
        _ = try await alice.addChatMember(chat, xia.identity.user)
        // Bob, who has not synced since, writes under the first epoch after Xia joined.
        _ = try await bob.sendMessage(chat, text: "bob, late, under the first epoch")
        // Alice receives only that message: she looks at its epoch (not the chat's history) and wraps the first epoch to Xia.
        let (aliceReport, _) = try await syncPair(alice, bob)
        #expect(aliceReport.keyEventsWritten >= 1, "\(aliceReport)")
        try await syncPair(xia, alice)
        let texts = try xia.readableChatPage(chat, limit: 100).messages.compactMap { $0.content.value?.text }
        #expect(texts.contains("bob, late, under the first epoch"), "\(texts)")
        // Xia holds the first epoch because of Bob's message, and reads the history under it too (the epoch is the unit shared).
        #expect(try xia.projections.wraps(of: chat.raw, epoch: first).contains { $0.device == xia.identity.device.raw })
        for node in [alice, bob, yann, xia] { await node.close() }
    }

    @Test("received messages are looked at by epoch; a chat event, or more messages than a list keeps, make the chat looked at whole")
    func triggers() throws {
        // Each from an author of its own: a first event (seq 1, no prev) each.
        func event(_ kind: EventKind, _ chat: ObjectID) throws -> Event {
            let key = SigningKey.generate()
            let payload =
                kind == .messageSent
                ? MessageSentPayload(body: Random.bytes(80)).cbor
                : ChatKeyPayload(epoch: Random.bytes32(), wraps: Random.bytes(80), ephemeral: Random.bytes32()).cbor
            return try UnsignedEvent(author: key.publicKey, seq: 1, prev: nil, hlc: HLC(rawValue: 1), kind: kind, object: chat, payload: payload)
                .signed(with: key)
        }
        var t = ChatKeyTriggers()
        #expect(t.isEmpty)
        let (quiet, keyed, busy) = (Random.bytes32(), Random.bytes32(), Random.bytes32())
        let m = try event(.messageSent, quiet)
        let noted = t.note(m)
        #expect(noted)
        #expect(!t.isEmpty && t.chats.isEmpty && t.messages[quiet] == [m.id])
        // A key event makes its chat whole, and its messages need no list.
        _ = t.note(try event(.messageSent, keyed))
        let keyNoted = t.note(try event(.chatKey, keyed))
        #expect(keyNoted)
        #expect(t.chats == [keyed] && t.messages[keyed] == nil)
        _ = t.note(try event(.messageSent, keyed))
        #expect(t.messages[keyed] == nil)
        // Past the list's size, the chat is looked at whole.
        for _ in 0...ChatKeyTriggers.messagesPerChat { _ = t.note(try event(.messageSent, busy)) }
        #expect(t.chats.contains(busy) && t.messages[busy] == nil && t.messages[quiet] == [m.id])
        // A failed pass's triggers merged into later ones: a chat whole in
        // either stays whole; message lists add up.
        var later = ChatKeyTriggers()
        let m2 = try event(.messageSent, quiet)
        _ = later.note(m2)
        _ = later.note(try event(.messageSent, keyed))
        later.merge(t)
        #expect(later.chats == t.chats && later.messages[quiet] == [m2.id, m.id] && later.messages[keyed] == nil)
    }

    @Test("in a live session the key is wrapped and delivered while connected")
    func liveDelivery() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let chat = try await alice.createChat(title: "Live", members: [bob.identity.user]).object
        let server = try SyncServer(node: alice, options: .patient(live: true))
        let listener = try await server.listen(host: "127.0.0.1", port: 0)
        let live = Task { try await SyncNetwork.sync(bob, host: "127.0.0.1", port: listener.port, options: .patient(live: true)) }
        let readable = try await eventually(.seconds(120)) {
            guard let view = try bob.projections.chatView(chat) else { return false }
            return try bob.readableChat(view).title?.value == "Live"
        }
        #expect(readable, "the title never became readable during the live session")
        live.cancel()
        _ = try? await bounded(.seconds(120), "live end") { try await live.value }
        await listener.shutdown()
        await server.shutdown()
        await alice.close()
        await bob.close()
    }
}
