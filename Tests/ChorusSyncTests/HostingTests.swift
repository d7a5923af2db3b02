import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Specs/sync.md §8.1 and §4.11: relays that host a part (`--host listed`)
/// keep only their users' feeds and the directory, and leave what is
/// addressed to a user at that user's inbox relay as notices.
@Suite("Listed relays and inboxes, over TCP on 127.0.0.1", .closingNodes)
struct HostingTests {
    /// A relay serving as `chorus serve --host listed` does.
    static func listed(_ dir: SyncTempDir, _ name: String, network: NetworkConfig) async throws -> ServedRelay {
        try await ServedRelay.start(dir, name, network: network, options: .relay(hostsListed: true))
    }

    /// Two listed relays, one to be users' home (and the network's
    /// bootstrap relay), one their inbox, and the network that names them.
    static func homeAndInbox(_ dir: SyncTempDir) async throws -> (home: ServedRelay, inbox: ServedRelay, network: NetworkConfig) {
        var net = testNetwork()
        let home = try await listed(dir, "home", network: net)
        let inbox = try await listed(dir, "inbox", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: home.address, key: home.key)]
        return (home, inbox, net)
    }

    static func syncByLists(_ node: Node, hops: Int) async throws -> (plan: RelayPlan, results: [RelaySyncResult]) {
        let (plan, results) = try await bounded(.seconds(120), "sync by relay lists") {
            try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: hops))
        }
        for r in results {
            if case .failure(let error) = r.outcome { Issue.record("\(r.relay.address) failed: \(error)") }
        }
        return (plan, results)
    }

    static func height(_ node: Node, _ feed: PublicKey) throws -> UInt64 { try node.head(of: feed)?.seq ?? 0 }

    @Test("a listed relay keeps its users' feeds and every user key's directory feed, nothing else; an invitation reaches a member through the member's inbox relay")
    func listedRelaysAndInboxes() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boot = try await Self.listed(dir, "boot", network: net)
        let r1 = try await Self.listed(dir, "r1", network: net)
        let r2 = try await Self.listed(dir, "r2", network: net)
        let r3 = try await Self.listed(dir, "r3", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        // Alice lives on relay 1; Bob on relay 2 with his inbox on relay 3.
        _ = try await alice.setRelays([r1.relay(.all)])
        _ = try await bob.setRelays([r2.relay(.home), r3.relay(.inbox)])
        _ = try await alice.setProfile(.bio, .text("Alice on relay 1"))
        _ = try await bob.setProfile(.bio, .text("Bob on relay 2"))
        for node in [alice, bob] { _ = try await Self.syncByLists(node, hops: 0) }

        let aliceDevice = alice.identity.device.raw
        let bobDevice = bob.identity.device.raw
        #expect(try Self.height(r1.node, aliceDevice) == Self.height(alice, aliceDevice))
        #expect(try Self.height(r2.node, bobDevice) == Self.height(bob, bobDevice))
        // Hosted nowhere else: the bootstrap relay holds only the user keys' feeds.
        #expect(try Self.height(r2.node, aliceDevice) == 0 && Self.height(r1.node, bobDevice) == 0)
        #expect(try Self.height(boot.node, aliceDevice) == 0 && Self.height(boot.node, bobDevice) == 0)
        #expect(try boot.node.projections.relays(of: alice.identity.user)?.relays == [r1.relay(.all)])
        #expect(try boot.node.projections.relays(of: bob.identity.user)?.relays.count == 2)

        // Carol, listed nowhere, syncs straight with relay 1: only her user
        // key's feed (her binding) is kept, and the session is not a fault.
        _ = try await carol.setProfile(.bio, .text("Carol, unlisted"))
        let direct = try await bounded(.seconds(120), "carol's direct sync") {
            try await SyncNetwork.sync(carol, host: "127.0.0.1", port: r1.listener.port, options: .patient)
        }
        #expect(direct.complete)
        #expect(try Self.height(r1.node, carol.identity.device.raw) == 0)
        #expect(try Self.height(r1.node, carol.identity.user.raw) == Self.height(carol, carol.identity.user.raw))
        #expect(r1.server.bans.refusal(carol.identity.device.raw) == nil)

        // Alice invites Bob to an encrypted chat. Her syncs leave the
        // invitation and the key wraps at Bob's inbox (relay 3), which does
        // not host her feed.
        let chat = try await alice.createChat(title: "Across relays", members: [bob.identity.user]).object
        _ = try await alice.sendMessage(chat, text: "hello from relay 1")
        let (plan, results) = try await Self.syncByLists(alice, hops: 0)
        #expect(plan.relays.contains { $0.key == r3.key && $0.reasons.contains("inbox") }, "\(plan.relays)")
        // The first sync learned Bob's device key and wrapped the chat key to it; the next leaves that too.
        _ = try await Self.syncByLists(alice, hops: 0)
        let left = results.reduce(0) { if case .success(let r) = $1.outcome { $0 + r.deliveriesLeft } else { $0 } }
        #expect(left >= 1, "the invitation was left at relay 3")
        #expect(try Self.height(r3.node, aliceDevice) == 0, "relay 3 holds notices, not Alice's feed")
        #expect(try InboxStore(readingFrom: r3.node.store).count() >= 2)

        // Bob's sync takes the notices from his inbox, finds Alice's home
        // relay through her relay list, and reads the chat.
        let (bobPlan, bobResults) = try await Self.syncByLists(bob, hops: 0)
        let notices = bobResults.reduce(0) { if case .success(let r) = $1.outcome { $0 + r.noticesReceived } else { $0 } }
        #expect(notices >= 2)
        #expect(bobPlan.relays.contains { $0.key == r1.key }, "Alice's home relay was found: \(bobPlan.relays)")
        let page = try bob.readableChatPage(chat)
        #expect(page.messages.map { $0.content.value?.text } == ["hello from relay 1"])
        #expect(try bob.readableChat(try #require(try bob.projections.chatView(chat))).title?.value == "Across relays")
        // A second sync brings no notice again.
        let (_, again) = try await Self.syncByLists(bob, hops: 0)
        #expect(again.allSatisfy { if case .success(let r) = $0.outcome { r.noticesReceived == 0 } else { false } })

        for node in [alice, bob, carol] { await node.close() }
        for relay in [boot, r1, r2, r3] { await relay.stop() }
    }

    @Test("relays exchange the directory with the bootstrap relay (every user's binding and list, no feed they do not host), so a node finds the lists of the users it follows at its own relay; a list too new for it is found at the bootstrap relay")
    func directoryExchange() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boot = try await Self.listed(dir, "boot", network: net)
        let r1 = try await Self.listed(dir, "r1", network: net)
        let r2 = try await Self.listed(dir, "r2", network: net)
        let r3 = try await Self.listed(dir, "r3", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        _ = try await alice.setRelays([r1.relay(.all)])
        _ = try await bob.setRelays([r2.relay(.all)])
        _ = try await alice.setProfile(.bio, .text("Alice on relay 1"))
        for node in [alice, bob] { _ = try await Self.syncByLists(node, hops: 0) }
        #expect(try r2.node.projections.relays(of: alice.identity.user) == nil, "only the bootstrap relay and her own hold her list yet")

        // Each relay's exchange with the bootstrap relay (chorus serve
        // --directory-interval): both directions, the directory only.
        func exchange(_ relay: ServedRelay) async throws -> SyncReport {
            let bootstraps = net.bootstrapRelays
            let done = try await bounded(.seconds(120), "directory exchange") {
                await SyncNetwork.exchangeDirectory(relay.node, hostsListed: true, bootstrapRelays: bootstraps)
            }
            #expect(done.count == 1)
            return try #require(done.first).outcome.get()
        }
        let first = try await exchange(r2)
        #expect(first.directory && first.reconciled && first.complete)
        #expect(try r2.node.projections.relays(of: alice.identity.user)?.relays == [r1.relay(.all)])
        #expect(try Self.height(r2.node, alice.identity.user.raw) == Self.height(alice, alice.identity.user.raw))
        #expect(try Self.height(r2.node, alice.identity.device.raw) == 0, "her device feed is hosted elsewhere")
        _ = try await exchange(r1)
        #expect(try r1.node.projections.relays(of: bob.identity.user) != nil)
        #expect(try Self.height(boot.node, alice.identity.device.raw) == 0 && Self.height(boot.node, bob.identity.device.raw) == 0)
        // In step, an exchange moves nothing and costs about a kilobyte.
        _ = try await exchange(r2)  // takes what r1's exchange gave the bootstrap relay (r1's own user key)
        let again = try await exchange(r2)
        #expect(again.eventsReceived == 0 && again.eventsSent == 0)
        #expect(again.bytesSent + again.bytesReceived < 2048, "\(again.bytesSent) + \(again.bytesReceived) bytes")

        // Bob follows Alice: his own relay tells him where she lives; no bootstrap relay is met.
        _ = try await bob.follow(alice.identity.user)
        let (_, results) = try await Self.syncByLists(bob, hops: 1)
        #expect(!results.contains { $0.relay.key == boot.key }, "\(results.map(\.relay))")
        #expect(results.contains { $0.relay.key == r1.key && $0.relay.reasons.contains("home") })
        #expect(try bob.profile(of: alice.identity.user).bio == "Alice on relay 1")

        // Carol joins after the exchanges, on a relay of her own: her list
        // is at the bootstrap relay and hers only, and Bob's sync adds the
        // bootstrap relay once the relays it met did not know her.
        let carol = try await makeNode(dir, "carol", network: net)
        _ = try await carol.setRelays([r3.relay(.all)])
        _ = try await carol.setProfile(.bio, .text("Carol, new"))
        _ = try await Self.syncByLists(carol, hops: 0)
        _ = try await bob.follow(carol.identity.user)
        let (_, later) = try await Self.syncByLists(bob, hops: 1)
        #expect(later.contains { $0.relay.key == boot.key && $0.relay.reasons == ["bootstrap"] }, "\(later.map { ($0.relay.address, $0.relay.reasons, $0.relay.covers.map(\.short)) }) boot \(boot.address)")
        #expect(later.contains { $0.relay.key == r3.key && $0.relay.reasons.contains("home") })
        #expect(try bob.profile(of: carol.identity.user).bio == "Carol, new")
        for node in [alice, bob, carol] { await node.close() }
    }

    @Test("a user who moves home loses nothing: the new relay takes the history from the user's device, followers find it there, and the old relay reports what it still holds")
    func movingHome() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boot = try await Self.listed(dir, "boot", network: net)
        let old = try await Self.listed(dir, "old", network: net)
        let new = try await Self.listed(dir, "new", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let alice = try await makeNode(dir, "alice", network: net)
        let dave = try await makeNode(dir, "dave", network: net)
        _ = try await alice.setRelays([old.relay(.all)])
        for i in 0..<20 { _ = try await alice.setProfile(.bio, .text("post \(i)")) }
        _ = try await Self.syncByLists(alice, hops: 0)
        let device = alice.identity.device.raw
        #expect(try Self.height(old.node, device) == Self.height(alice, device))
        #expect(try HostingCensus.take(at: old.node).hostedUsers == 1)
        let before = try Self.height(alice, device)

        _ = try await alice.setRelays([new.relay(.all)])
                _ = try await Self.syncByLists(alice, hops: 0)
        #expect(try Self.height(new.node, device) == Self.height(alice, device), "the whole history moved")
        // The old relay learns the new list when Alice's node offers it
        // there (a sync straight with it), and takes nothing of hers after.
        for text in ["told the old relay", "after that"] {
            _ = try await alice.setProfile(.bio, .text(text))
            _ = try await bounded(.seconds(120), "alice syncs with the old relay") {
                try await SyncNetwork.sync(alice, host: "127.0.0.1", port: old.listener.port, options: .patient)
            }
        }
        _ = try await Self.syncByLists(alice, hops: 0)
        let held = try Self.height(old.node, device)
        let now = try Self.height(alice, device)
        #expect(held >= before && held < now, "it accepts no new event of hers")
        let census = try HostingCensus.take(at: old.node)
        #expect(census.hostedUsers == 0 && census.formerUsers[alice.identity.user.raw] == held, "\(census)")

        _ = try await dave.follow(alice.identity.user)
        let (plan, _) = try await Self.syncByLists(dave, hops: 1)
        #expect(plan.relays.contains { $0.key == new.key && $0.covers == [alice.identity.user.raw] }, "\(plan.relays)")
        guard case .text(let bio) = try dave.projections.profile(alice.identity.user).field("bio") else {
            Issue.record("no bio")
            return
        }
        #expect(bio == "after that")
        for node in [alice, dave] { await node.close() }
        for relay in [boot, old, new] { await relay.stop() }
    }

    @Test("a follower's feed that reached the followed user's relay before the follow notice reached its inbox is still fetched")
    func correspondentAlreadyOnTheRelay() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let (home, inbox, net) = try await Self.homeAndInbox(dir)
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        _ = try await alice.setRelays([home.relay(.home), inbox.relay(.inbox)])
        _ = try await bob.setRelays([home.relay(.home), inbox.relay(.inbox)])
        _ = try await bob.follow(alice.identity.user)
        // Bob's follow cannot be left yet: Alice's list is not known to him.
        _ = try await Self.syncByLists(bob, hops: 0)
        _ = try await Self.syncByLists(alice, hops: 0)
        // Now it is; his feed, unchanged, is already on the home relay.
        let (_, left) = try await Self.syncByLists(bob, hops: 0)
        #expect(left.reduce(0) { if case .success(let r) = $1.outcome { $0 + r.deliveriesLeft } else { $0 } } == 1)
        // Alice takes the notice; a follower can wait a sync (Specs/sync.md
        // §9 step 5), so his feed comes within her next two.
        for _ in 0..<3 where try Self.height(alice, bob.identity.device.raw) != Self.height(bob, bob.identity.device.raw) {
            _ = try await Self.syncByLists(alice, hops: 0)
        }
        #expect(try Self.height(alice, bob.identity.device.raw) == Self.height(bob, bob.identity.device.raw))
        #expect(try alice.projections.followers(of: alice.identity.user).map(\.raw) == [bob.identity.user.raw])
        for node in [alice, bob] { await node.close() }
        for relay in [home, inbox] { await relay.stop() }
    }

    @Test("an invitation already left at an inbox relay for one member is left there again for a member whose list the sender learns later")
    func invitationLeftPerAddressee() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let (home, inbox, net) = try await Self.homeAndInbox(dir)
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        for node in [alice, bob, carol] { _ = try await node.setRelays([home.relay(.home), inbox.relay(.inbox)]) }
        _ = try await Self.syncByLists(bob, hops: 0)
        // Alice invites Bob and Carol while only Bob's list is published:
        // her sync leaves the invitation at the shared inbox for Bob alone.
        let chat = try await alice.createChat(title: "Two inboxes in one", members: [bob.identity.user, carol.identity.user]).object
        _ = try await Self.syncByLists(alice, hops: 0)
        func invitations(for user: UserID) throws -> Int {
            try InboxStore(readingFrom: inbox.node.store).notices(for: user.raw).notices.filter {
                (try? Event.decode($0.envelope)).map { $0.kind == .chatCreated && $0.object == chat.raw } ?? false
            }.count
        }
        #expect(try invitations(for: bob.identity.user) == 1)
        #expect(try invitations(for: carol.identity.user) == 0)
        // Carol publishes her list; Alice's next sync learns it and leaves
        // the same invitation at the same relay for Carol too.
        _ = try await Self.syncByLists(carol, hops: 0)
        _ = try await Self.syncByLists(alice, hops: 0)
        #expect(try invitations(for: carol.identity.user) == 1)
        #expect(try InboxStore.pending(at: alice).filter { $0.relay.key == inbox.key }.isEmpty)
        _ = try await Self.syncByLists(carol, hops: 0)
        #expect(try carol.projections.chatView(chat) != nil, "Carol holds the chat she was invited to")
        for node in [alice, bob, carol] { await node.close() }
        for relay in [home, inbox] { await relay.stop() }
    }

    @Test("a follower leaves the followed user's scope once its follow is held; an unfollow reaches the followed user as a notice too")
    func answeredNoticesLeaveTheScope() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let (home, inbox, net) = try await Self.homeAndInbox(dir)
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        _ = try await alice.setRelays([home.relay(.home), inbox.relay(.inbox)])
        _ = try await bob.setRelays([home.relay(.home), inbox.relay(.inbox)])
        _ = try await Self.syncByLists(alice, hops: 1)
        _ = try await bob.follow(alice.identity.user)
        _ = try await Self.syncByLists(bob, hops: 1)
        // Alice takes the notice, then Bob's feed with the follow.
        _ = try await Self.syncByLists(alice, hops: 1)
        _ = try await Self.syncByLists(alice, hops: 1)
        #expect(try alice.projections.followers(of: alice.identity.user).map(\.raw) == [bob.identity.user.raw])
        // The follow is held: Bob is no longer in Alice's scope (she does not follow him).
        let scope = try #require(try ReplicationScope(hops: 1).users(of: alice))
        #expect(!scope.contains(bob.identity.user.raw))
        #expect(try InboxStore.correspondents(of: alice.identity.user.raw, at: alice).users.isEmpty)
        let plan = try RelayPlan.make(for: alice, scope: ReplicationScope(hops: 1))
        #expect(!plan.relays.contains { $0.covers.contains(bob.identity.user.raw) }, "\(plan.relays)")
        // Bob's unfollow is addressed to Alice: it comes back into her scope
        // as a notice and her followers list empties.
        _ = try await bob.unfollow(alice.identity.user)
        _ = try await Self.syncByLists(bob, hops: 1)
        _ = try await Self.syncByLists(alice, hops: 1)
        _ = try await Self.syncByLists(alice, hops: 1)
        #expect(try alice.projections.followers(of: alice.identity.user).isEmpty)
        for node in [alice, bob] { await node.close() }
        for relay in [home, inbox] { await relay.stop() }
    }

    @Test("followers who follow before they know the followed user's list reach it as notices, and the followed user then holds their feeds")
    func followersThroughTheInbox() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        var relays: [ServedRelay] = []
        for i in 0..<4 { relays.append(try await Self.listed(dir, "r\(i)", network: net)) }
        net.bootstrapRelays = [BootstrapRelay(address: relays[0].address, key: relays[0].key)]
        var nodes: [Node] = []
        for i in 0..<12 {
            let node = try await makeNode(dir, "u\(i)", network: net)
            _ = try await node.setRelays([relays[i % 4].relay(.home), relays[(i + 1) % 4].relay(.home), relays[(i + 2) % 4].relay(.inbox)])
            _ = try await node.setProfile(.bio, .text("bio of u\(i)"))
            nodes.append(node)
        }
        for i in 0..<12 { for j in [(i + 1) % 12, (i + 5) % 12] { _ = try await nodes[i].follow(nodes[j].identity.user) } }
        // Round 1 publishes the lists (a follower early in it cannot know a
        // later user's); then the follows are left at the inboxes and every
        // followed user takes them and fetches its followers. Both can wait
        // a sync (Specs/sync.md §9 step 5): where the relays a sync meets
        // anyway do not serve them, one relay more every other sync does.
        func complete() throws -> Bool {
            try (0..<12).allSatisfy { i in
                try Set(nodes[i].projections.followers(of: nodes[i].identity.user).map(\.raw))
                    == Set([(i + 11) % 12, (i + 7) % 12].map { nodes[$0].identity.user.raw })
            }
        }
        var rounds = 0
        while rounds < 12, try rounds < 3 || !complete() {
            for node in nodes { _ = try await Self.syncByLists(node, hops: 1) }
            rounds += 1
        }
        for i in 0..<12 {
            let followers = [(i + 11) % 12, (i + 7) % 12].map { nodes[$0] }
            for follower in followers {
                let device = follower.identity.device.raw
                #expect(try Self.height(nodes[i], device) == Self.height(follower, device), "u\(i) holds its follower's feed")
            }
            #expect(Set(try nodes[i].projections.followers(of: nodes[i].identity.user).map(\.raw)) == Set(followers.map(\.identity.user.raw)))
        }
        for node in nodes { await node.close() }
        for relay in relays { await relay.stop() }
    }

    @Test("followers whose homes the plan does not meet wait: one relay more every other sync, the longest waiting first, until every one is held")
    func followersBeyondTheBudgetWait() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        var relays: [ServedRelay] = []
        for i in 0..<6 { relays.append(try await Self.listed(dir, "r\(i)", network: net)) }
        net.bootstrapRelays = [BootstrapRelay(address: relays[0].address, key: relays[0].key)]
        let alice = try await makeNode(dir, "alice", network: net)
        _ = try await alice.setRelays([relays[0].relay(.all)])
        _ = try await Self.syncByLists(alice, hops: 0)
        // Five followers, each at home on a relay of its own.
        var followers: [Node] = []
        for i in 1...5 {
            let node = try await makeNode(dir, "f\(i)", network: net)
            _ = try await node.setRelays([relays[i].relay(.all)])
            _ = try await node.follow(alice.identity.user)
            _ = try await Self.syncByLists(node, hops: 1)
            followers.append(node)
        }
        func held() throws -> Set<PublicKey> { Set(try alice.projections.followers(of: alice.identity.user).map(\.raw)) }
        // On her turn (every other sync) the plan meets her own relay and
        // one more; otherwise her own relay only. The rest wait: not every
        // follower in one sync...
        let memory = try RoutingMemory(node: alice)
        let turn = RelayPlan.isWaitingTurn(of: alice.identity.user, at: try memory.syncs())
        let (plan, results) = try await bounded(.seconds(120), "alice's first sync") {
            try await SyncNetwork.syncByRelayLists(alice, scope: ReplicationScope(hops: 1))
        }
        #expect(results.allSatisfy { if case .success = $0.outcome { true } else { false } })
        let first = try held()
        #expect(first.count == (turn ? 1 : 0), "\(first.count) followers after one sync, plan \(plan.relays.map(\.reasons))")
        // ...and every one of them after a few, one more each turn.
        for _ in 0..<12 where try held().count < 5 {
            _ = try await bounded(.seconds(120), "alice's later sync") {
                try await SyncNetwork.syncByRelayLists(alice, scope: ReplicationScope(hops: 1))
            }
        }
        #expect(try held() == Set(followers.map(\.identity.user.raw)))
        for node in [alice] + followers { await node.close() }
        for relay in relays { await relay.stop() }
    }

    @Test("with one relay connection at a time a sync still covers every followed user; a user whose home relays all fail is reported uncovered")
    func oneConnectionAtATimeCoversEveryone() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boot = try await Self.listed(dir, "boot", network: net)
        let r1 = try await Self.listed(dir, "r1", network: net)
        let r2 = try await Self.listed(dir, "r2", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        _ = try await alice.setRelays([r1.relay(.all)])
        _ = try await bob.setRelays([r2.relay(.all)])
        for node in [alice, bob] { _ = try await Self.syncByLists(node, hops: 0) }
        _ = try await carol.follow(alice.identity.user)
        _ = try await carol.follow(bob.identity.user)
        let (plan, results) = try await bounded(.seconds(120), "carol's sync") {
            try await SyncNetwork.syncByRelayLists(carol, scope: ReplicationScope(hops: 1), maxConnections: 1)
        }
        #expect(Set(plan.relays.map(\.key)).isSuperset(of: [boot.key, r1.key, r2.key]) && plan.uncovered.isEmpty, "\(plan.relays)")
        #expect(results.allSatisfy { if case .success = $0.outcome { true } else { false } })
        for user in [alice, bob] {
            #expect(try Self.height(carol, user.identity.device.raw) == Self.height(user, user.identity.device.raw))
        }
        // Bob's only home relay goes away: he is reported uncovered, Alice still comes.
        await r2.stop()
        _ = try await alice.setProfile(.bio, .text("later"))
        _ = try await Self.syncByLists(alice, hops: 0)
        let (after, again) = try await bounded(.seconds(120), "carol's sync without relay 2") {
            try await SyncNetwork.syncByRelayLists(carol, scope: ReplicationScope(hops: 1), maxConnections: 1)
        }
        #expect(after.uncovered == [bob.identity.user.raw], "\(after.uncovered)")
        #expect(again.contains { if case .failure = $0.outcome { $0.relay.key == r2.key } else { false } })
        #expect(try Self.height(carol, alice.identity.device.raw) == Self.height(alice, alice.identity.device.raw))
        for node in [alice, bob, carol] { await node.close() }
        for relay in [boot, r1] { await relay.stop() }
    }

    @Test("a node's own addressed events are indexed as its feed grows: a plan reads those, and the waiting inboxes follow new follows and what was left")
    func ownAddressedEventsAreIndexed() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let inbox = Relay(address: "127.0.0.1:9", key: SigningKey.generate().publicKey, roles: .inbox)
        _ = try await bob.setRelays([Relay(address: "127.0.0.1:8", key: SigningKey.generate().publicKey, roles: .home), inbox])
        // Alice knows Bob's list; she posts (not addressed) and follows him (addressed).
        let bobsEvents = try bob.feedEnvelopes(bob.identity.user.raw, fromSeq: 1, limit: .max).map(\.envelope)
        _ = await alice.ingest(bobsEvents)
        _ = try await alice.setProfile(.bio, .text("not addressed"))
        _ = try await alice.follow(bob.identity.user)
        let store = try InboxStore(node: alice)
        let first = try InboxStore.addressedOwnEvents(at: alice, store: store)
        #expect(first.map(\.header.kind) == [.followAdded], "\(first.map(\.header.kind))")
        #expect(try InboxStore.pending(at: alice).map(\.relay.key) == [inbox.key])
        // More events: the index grows from where it stopped, and what was left stops waiting.
        _ = try await alice.setProfile(.bio, .text("still not addressed"))
        try await store.markLeft(first.map { InboxStore.Pair($0.id, bob.identity.user.raw) }, at: inbox.key)
        #expect(try InboxStore.pending(at: alice).isEmpty)
        let carol = try await makeNode(dir, "carol", network: net)
        _ = await alice.ingest(try carol.feedEnvelopes(carol.identity.user.raw, fromSeq: 1, limit: .max).map(\.envelope))
        _ = try await alice.follow(carol.identity.user)
        #expect(try InboxStore.addressedOwnEvents(at: alice, store: store).map(\.header.kind) == [.followAdded, .followAdded])
        for n in [alice, bob, carol] { await n.close() }
    }
}
