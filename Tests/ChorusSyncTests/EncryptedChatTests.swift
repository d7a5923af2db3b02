import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// What `node` can read of `message`: its text, or nil when locked or unreadable.
func readText(_ node: Node, _ message: MessageID) throws -> String? {
    guard let view = try node.projections.message(message) else { return nil }
    return try node.readableMessage(view).content.value?.text
}

/// Every effective message of a chat, oldest first.
func allMessages(_ node: Node, _ chat: ChatID) throws -> [MessageView] {
    var out: [MessageView] = []
    var before: MessageCursor? = nil
    while true {
        let page = try node.projections.chat(chat, limit: 200, before: before)
        out = page.messages + out
        guard let older = page.older else { return out }
        before = older
    }
}

/// Binds a new device of `owner`'s user, as `chorus init --user` and
/// `chorus device add` do. The new device publishes its encryption key at once.
func bindNewDevice(_ dir: SyncTempDir, _ name: String, of owner: Node, network: NetworkConfig) async throws -> Node {
    let device = opened(try await Node.createDevice(at: dir.store(name), user: owner.identity.user, network: network))
    try await owner.addDevice(device.identity.device, proof: try device.bindingProof(), name: name)
    return device
}

@Suite("Encrypted chats across nodes (Specs/encryption.md)", .closingNodes)
struct EncryptedChatTests {
    @Test("a deleted message's opened text leaves memory with the commit that stores the deletion, here and at a member's node")
    func aDeletedMessagesPlaintextIsForgotten() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        try await syncPair(alice, bob)
        let chat = try await alice.createChat(title: "plans", members: [bob.identity.user]).object
        let kept = try await alice.sendMessage(chat, text: "stays").object
        let gone = try await alice.sendMessage(chat, text: "secret").object
        _ = try await alice.editMessage(gone, text: "secret, edited")
        try await syncPair(alice, bob)
        #expect(try readText(bob, gone) == "secret, edited" && readText(alice, gone) == "secret, edited")
        func held(_ node: Node, _ message: MessageID) -> Bool {
            node.openedContent.get(.sent(message.raw)) != nil
        }
        #expect(held(alice, gone) && held(bob, gone) && held(bob, kept) == false)
        _ = try readText(bob, kept)

        _ = try await alice.deleteMessage(gone)
        #expect(!held(alice, gone), "the deleting node forgets at once")
        #expect(held(bob, gone), "the member's node has not seen the deletion yet")
        try await syncPair(alice, bob)
        #expect(!held(bob, gone), "the deletion arrived by sync and the opened text went with it")
        #expect(held(bob, kept), "other messages stay kept")
        #expect(try readText(bob, gone) == nil)
        // A read that opened the message on a snapshot from before the
        // deletion cannot put it back.
        bob.openedContent.put(.sent(gone.raw), "secret")
        #expect(!held(bob, gone))
    }

    @Test func aDeviceBoundAfterFiftyMessagesReadsThemAllThroughAnotherUsersNode() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let phone = try await makeNode(dir, "alice-phone", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let relay = try await makeNode(dir, "relay", network: net)
        try await syncPair(bob, relay)
        try await syncPair(phone, relay)
        let chat = try await phone.createChat(title: "climbing", members: [bob.identity.user]).object
        try await syncPair(phone, relay)
        try await syncPair(bob, relay)
        var sent: [(MessageID, String)] = []
        for i in 0..<50 {
            let sender = i % 3 == 0 ? bob : phone
            let text = "message \(i) from \(sender === bob ? "bob" : "alice")"
            sent.append((try await sender.sendMessage(chat, text: text).object, text))
            if i % 10 == 9 {
                try await syncPair(phone, relay)
                try await syncPair(bob, relay)
            }
        }
        try await syncPair(phone, relay)
        try await syncPair(bob, relay)

        // Alice binds her tablet on her phone; the phone does not know the
        // tablet's encryption key yet, so it cannot wrap anything to it.
        let tablet = try await bindNewDevice(dir, "alice-tablet", of: phone, network: net)
        try await syncPair(phone, relay)  // the binding reaches the relay
        // The tablet never talks to the phone: it meets Bob, Bob meets the relay.
        try await syncPair(tablet, bob)  // Bob learns the tablet's key
        let (_, bobReport) = try await syncPair(relay, bob)  // Bob learns the binding and shares
        #expect(bobReport.keyEventsWritten >= 1)
        try await syncPair(tablet, bob)

        #expect(try allMessages(tablet, chat).count == 50)
        for (id, text) in sent { #expect(try readText(tablet, id) == text) }
        let title = try tablet.readableChat(#require(try tablet.projections.chatView(chat))).title
        #expect(title == .content("climbing"))
        // The relay holds every event and reads none of them.
        #expect(try allMessages(relay, chat).count == 50)
        for (id, _) in sent { #expect(try readText(relay, id) == nil) }
        #expect(try digest(tablet) == digest(bob))
        for n in [phone, bob, relay, tablet] { await n.close() }
    }

    @Test func aRemovedMemberCannotReadWhatIsSentAfterItsRemovalButKeepsWhatCameBefore() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        let relay = try await makeNode(dir, "relay", network: net)
        for n in [alice, bob, carol, alice] { try await syncPair(n, relay) }
        let chat = try await alice.createChat(title: "plans", members: [bob.identity.user, carol.identity.user]).object
        let before = try await alice.sendMessage(chat, text: "before the removal").object
        for n in [alice, bob, carol] { try await syncPair(n, relay) }
        #expect(try readText(carol, before) == "before the removal")

        try await alice.removeChatMember(chat, carol.identity.user)
        let afterAlice = try await alice.sendMessage(chat, text: "carol is gone").object
        try await syncPair(alice, relay)
        try await syncPair(bob, relay)
        let afterBob = try await bob.sendMessage(chat, text: "good riddance").object
        try await syncPair(bob, relay)
        // Carol keeps syncing every event of the chat.
        try await syncPair(carol, relay)
        #expect(try allMessages(carol, chat).count == 3)
        #expect(try readText(carol, before) == "before the removal")
        #expect(try readText(carol, afterAlice) == nil)
        #expect(try readText(carol, afterBob) == nil)
        guard let view = try carol.projections.message(afterBob) else {
            Issue.record("carol lacks the message")
            return
        }
        if case .locked = try carol.readableMessage(view).content {} else { Issue.record("expected locked for carol") }
        // The remaining members read everything.
        try await syncPair(alice, relay)
        for n in [alice, bob] {
            #expect(try readText(n, afterAlice) == "carol is gone")
            #expect(try readText(n, afterBob) == "good riddance")
        }
        for n in [alice, bob, carol, relay] { await n.close() }
    }

    @Test func anInviteeWithHopsOneReceivesAChatFromSomeoneItDoesNotFollow() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        let dave = try await makeNode(dir, "dave", network: net)
        let relay = try await makeNode(dir, "relay", network: net)
        var scoped = SyncOptions.patient
        scoped.scope = ReplicationScope(hops: 1)
        // Carol follows nobody; Bob has never seen her key when he creates the chat.
        let chat = try await bob.createChat(title: "surprise", members: [carol.identity.user]).object
        let hello = try await bob.sendMessage(chat, text: "hi Carol, it's Bob").object
        try await syncPair(bob, relay)
        _ = try await dave.sendMessage(try await dave.createChat(title: "unrelated", members: [bob.identity.user]).object, text: "x").object
        try await syncPair(dave, relay)
        try await syncPair(carol, relay, optionsA: scoped)
        // Carol holds the chat and Bob's feeds, not Dave's.
        #expect(try carol.projections.chatView(chat)?.members.map(\.user).contains(carol.identity.user) == true)
        #expect(try carol.head(of: dave.identity.device.raw) == nil)
        #expect(try readText(carol, hello) == nil)  // no key for her device yet
        // Bob meets Carol's key through the relay and shares the chat's epoch.
        let (bobReport, _) = try await syncPair(bob, relay)
        #expect(bobReport.keyEventsWritten >= 1)
        try await syncPair(bob, relay)
        try await syncPair(carol, relay, optionsA: scoped)
        #expect(try readText(carol, hello) == "hi Carol, it's Bob")
        let title = try carol.readableChat(#require(try carol.projections.chatView(chat))).title
        #expect(title == .content("surprise"))

        // Without invitations (an older node), the same scope misses the chat.
        let erin = try await makeNode(dir, "erin", network: net)
        let chat2 = try await bob.createChat(title: "second", members: [erin.identity.user]).object
        try await syncPair(bob, relay)
        var old = scoped
        old.invitations = false
        try await syncPair(erin, relay, optionsA: old)
        #expect(try erin.projections.chatView(chat2) == nil)
        try await syncPair(erin, relay, optionsA: scoped)
        #expect(try erin.projections.chatView(chat2) != nil)
        for n in [bob, carol, dave, relay, erin] { await n.close() }
    }

    @Test func aKindThisVersionDoesNotKnowIsStoredRelayedAndNeverBans() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let newer = try await makeNode(dir, "newer", network: net)
        let relay = try await makeNode(dir, "relay", network: net)
        let other = try await makeNode(dir, "other", network: net)
        // A newer node's feed: a known event, then kinds 99 and 4711, then a known one.
        let key = SigningKey.generate()
        var events: [Event] = []
        let t = UInt64(Date().timeIntervalSince1970 * 1000) - 10_000
        func add(_ kind: UInt64?, _ payload: CBORValue) throws {
            let seq = UInt64(events.count + 1), prev = events.last?.id, hlc = HLC(physicalMillis: t + seq, logical: 0)
            let unsigned = try kind.map {
                try UnsignedEvent.ofUnknownKind($0, author: key.publicKey, seq: seq, prev: prev, hlc: hlc, object: key.publicKey, payload: payload)
            } ?? UnsignedEvent(author: key.publicKey, seq: seq, prev: prev, hlc: hlc, kind: .profileSet, object: key.publicKey, payload: payload)
            events.append(unsigned.signed(with: key))
        }
        let bio = CBORValue.textMap([("field", .text("bio")), ("value", .text("from the future"))])
        try add(nil, bio)
        try add(99, .textMap([("reaction", .text("🎉")), ("weight", .unsigned(3))]))
        try add(4711, .null)
        try add(nil, bio)
        #expect(await newer.ingest(events: events).accepted == 4)
        let digestBefore = try digest(relay)
        let (_, relayReport) = try await syncPair(newer, relay)
        #expect(relayReport.eventsReceived >= 4)
        try await syncPair(relay, other)
        for n in [relay, other] {
            #expect(try n.feed(key.publicKey).map(\.event.kind.code) == [10, 99, 4711, 10])
            #expect(try n.feed(key.publicKey).map(\.event.id) == events.map(\.id))
            #expect(try n.log.integrityProblems().isEmpty)
        }
        // Not folded, and not a reason for any ban: a further sync runs clean.
        #expect(try digest(relay) != digestBefore)  // the profile.set events took effect
        #expect(try digest(relay) == digest(other))
        let (again, _) = try await syncPair(newer, relay)
        #expect(again.complete)
        for n in [newer, relay, other] { await n.close() }
    }
}
