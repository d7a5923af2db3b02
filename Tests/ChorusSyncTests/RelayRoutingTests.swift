import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Specs/sync.md §9: a node with no address syncs with the relays that its
/// users' relay lists name, found through the network's bootstrap relay.
@Suite("Sync by relay lists, over TCP on 127.0.0.1", .closingNodes)
struct RelayRoutingTests {
    static func serve(_ dir: SyncTempDir, _ name: String, network: NetworkConfig) async throws -> ServedRelay {
        try await ServedRelay.start(dir, name, network: network, options: .patient(live: true))
    }

    static func bio(_ node: Node, of user: UserID) throws -> String? {
        guard case .text(let t) = try node.projections.profile(user).field("bio") else { return nil }
        return t
    }

    @Test("a node finds each followed user at the user's home relay, through the bootstrap relay, and pinned keys are enforced")
    func followedUsersAreFetchedFromTheirHomeRelays() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boot = try await Self.serve(dir, "boot", network: net)
        let r1 = try await Self.serve(dir, "r1", network: net)
        let r2 = try await Self.serve(dir, "r2", network: net)
        // The invite carries the bootstrap relay.
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let joined = try NetworkConfig(invite: net.invite)
        #expect(joined.bootstrapRelays == net.bootstrapRelays && joined.fingerprint == net.fingerprint)
        let alice = try await makeNode(dir, "alice", network: joined)
        let bob = try await makeNode(dir, "bob", network: joined)
        let carol = try await makeNode(dir, "carol", network: joined)
        _ = try await alice.setRelays([Relay(address: r1.address, key: r1.key, roles: .home)])
        _ = try await bob.setRelays([Relay(address: r2.address, key: r2.key, roles: .all)])
        _ = try await alice.setProfile(.bio, .text("Alice lives on relay 1"))
        _ = try await bob.setProfile(.bio, .text("Bob lives on relay 2"))
        for node in [alice, bob] {
            let (plan, results) = try await bounded(.seconds(120), "publishing") {
                try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: 0))
            }
            #expect(Set(plan.relays.map(\.reasons.first)) == ["own", "bootstrap"], "\(plan.relays)")
            #expect(results.allSatisfy { if case .success(let r) = $0.outcome { r.complete } else { false } })
        }
        #expect(try Self.bio(r1.node, of: alice.identity.user) == "Alice lives on relay 1")
        #expect(try Self.bio(r2.node, of: bob.identity.user) == "Bob lives on relay 2")

        // Carol follows both and knows no relay list yet: only the bootstrap relay is planned.
        _ = try await carol.follow(alice.identity.user)
        _ = try await carol.follow(bob.identity.user)
        let before = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1))
        #expect(before.relays.map(\.key) == [boot.key] && before.unlisted.count == 2)
        // One sync: the bootstrap relay brings the lists, then each home relay is synced.
        let (plan, results) = try await bounded(.seconds(120), "carol's sync") {
            try await SyncNetwork.syncByRelayLists(carol, scope: ReplicationScope(hops: 1))
        }
        #expect(Set(plan.relays.map(\.key)) == [boot.key, r1.key, r2.key])
        let r1Entry = try #require(plan.relays.first { $0.key == r1.key })
        #expect(r1Entry.covers == [alice.identity.user.raw] && r1Entry.reasons == ["home"])
        #expect(results.allSatisfy { if case .success(let r) = $0.outcome { r.complete } else { false } })
        #expect(try Self.bio(carol, of: alice.identity.user) == "Alice lives on relay 1")
        #expect(try Self.bio(carol, of: bob.identity.user) == "Bob lives on relay 2")
        // With one connection at a time, one sync still meets every relay
        // the cover needs, one after the other.
        let dave = try await makeNode(dir, "dave", network: joined)
        _ = try await dave.follow(alice.identity.user)
        _ = try await dave.follow(bob.identity.user)
        let (first, _) = try await bounded(.seconds(120), "dave's sync, one connection at a time") {
            try await SyncNetwork.syncByRelayLists(dave, scope: ReplicationScope(hops: 1), maxConnections: 1)
        }
        #expect(Set(first.relays.map(\.key)) == [boot.key, r1.key, r2.key], "\(first.relays)")
        #expect(try Self.bio(dave, of: alice.identity.user) == "Alice lives on relay 1")
        #expect(try Self.bio(dave, of: bob.identity.user) == "Bob lives on relay 2")
        await dave.close()

        // A list naming the wrong key for an address: that relay is refused, the others still sync.
        let impostor = SigningKey.generate().publicKey
        _ = try await bob.setRelays([Relay(address: r1.address, key: impostor, roles: .all)])
        let pinned = try await bounded(.seconds(120), "a pinned key that does not match") {
            await SyncNetwork.syncRouted(
                bob, plan: RelayPlan(relays: [.init(address: r1.address, key: impostor, covers: [], reasons: ["own"])], uncovered: [], unlisted: []))
        }
        guard case .failure(let error) = try #require(pinned.first).outcome else {
            Issue.record("a relay proving another key was synced with")
            return
        }
        #expect((error as? SyncError)?.code == "relay_key_mismatch", "\(error)")
        for r in [boot, r1, r2] { await r.stop() }
        for n in [alice, bob, carol] { await n.close() }
    }

    @Test("a user who moves home loses nothing: the new relay gets the history from the user's device, followers find it there, the old relay may go")
    func movingHome() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boot = try await Self.serve(dir, "boot", network: net)
        let old = try await Self.serve(dir, "old", network: net)
        let new = try await Self.serve(dir, "new", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let alice = try await makeNode(dir, "alice", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        _ = try await alice.setRelays([Relay(address: old.address, key: old.key, roles: .all)])
        _ = try await alice.setProfile(.bio, .text("before the move"))
        _ = try await bounded(.seconds(120), "alice publishes") { try await SyncNetwork.syncByRelayLists(alice, scope: ReplicationScope(hops: 0)) }
        _ = try await carol.follow(alice.identity.user)
        _ = try await bounded(.seconds(120), "carol follows") { try await SyncNetwork.syncByRelayLists(carol, scope: ReplicationScope(hops: 1)) }
        #expect(try Self.bio(carol, of: alice.identity.user) == "before the move")

        // Alice moves: her list names the new relay only, and the old one goes away.
        _ = try await alice.setRelays([Relay(address: new.address, key: new.key, roles: .all)])
        _ = try await alice.setProfile(.bio, .text("after the move"))
        let (moved, _) = try await bounded(.seconds(120), "alice moves") { try await SyncNetwork.syncByRelayLists(alice, scope: ReplicationScope(hops: 0)) }
        // The old relay is told of the move (its list), so followers who know only the old list find it there.
        #expect(moved.relays.map(\.key).contains(new.key) && moved.relays.first { $0.key == old.key }?.reasons == ["former"], "\(moved.relays)")
        #expect(try old.node.projections.relays(of: alice.identity.user)?.relays.map(\.key) == [new.key])
        let (after, _) = try await bounded(.seconds(120), "alice again") { try await SyncNetwork.syncByRelayLists(alice, scope: ReplicationScope(hops: 0)) }
        #expect(!after.relays.contains { $0.key == old.key }, "a former relay that took the list is not met again: \(after.relays)")
        // The new relay holds her whole history, from her own device.
        #expect(try new.node.head(of: alice.identity.device.raw) == alice.head(of: alice.identity.device.raw))
        #expect(try new.node.head(of: alice.identity.user.raw) == alice.head(of: alice.identity.user.raw))
        await old.stop()

        // Carol's next sync finds Alice at the new relay, through the list the bootstrap relay now holds.
        let (plan, results) = try await bounded(.seconds(120), "carol after the move") {
            try await SyncNetwork.syncByRelayLists(carol, scope: ReplicationScope(hops: 1))
        }
        #expect(plan.relays.contains { $0.key == new.key && $0.covers == [alice.identity.user.raw] })
        #expect(try Self.bio(carol, of: alice.identity.user) == "after the move")
        // The old relay, gone, is the only failure, and it cost nothing acknowledged.
        let failed = results.filter { if case .failure = $0.outcome { true } else { false } }
        #expect(failed.allSatisfy { $0.relay.key == old.key }, "\(failed.map(\.relay.address))")
        for r in [boot, new] { await r.stop() }
        for n in [alice, carol] { await n.close() }
    }

    @Test("each relay of a routed sync brings its share of the scope, and the users of a relay that fails come from their other home relay")
    func sharesAndFailover() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        // Relays that hold every feed, so only the plan's shares decide what comes from where.
        let boot = try await Self.serve(dir, "boot", network: net)
        let r1 = try await Self.serve(dir, "r1", network: net)
        let r2 = try await Self.serve(dir, "r2", network: net)
        let r3 = try await Self.serve(dir, "r3", network: net)
        net.bootstrapRelays = [BootstrapRelay(address: boot.address, key: boot.key)]
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        _ = try await alice.setRelays([r1.relay(.all), r3.relay(.home)])
        _ = try await bob.setRelays([r2.relay(.all)])
        _ = try await alice.setProfile(.bio, .text("Alice on relays 1 and 3"))
        _ = try await bob.setProfile(.bio, .text("Bob on relay 2"))
        for node in [alice, bob] { _ = try await bounded(.seconds(120), "publishing") { try await SyncNetwork.syncByRelayLists(node, scope: ReplicationScope(hops: 0)) } }
        _ = try await carol.follow(alice.identity.user)
        _ = try await carol.follow(bob.identity.user)
        // Carol holds the lists (the user keys' feeds), not the users' device feeds.
        for user in [alice, bob] {
            let envelopes = try user.feedEnvelopes(user.identity.user.raw, fromSeq: 1, limit: .max).map(\.envelope)
            _ = await carol.ingest(envelopes)
        }
        #expect(try carol.projections.relays(of: alice.identity.user) != nil && carol.head(of: alice.identity.device.raw) == nil)

        // Each relay brings the users it covers; the bootstrap relay, covering no one, brings neither.
        let plan = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1))
        #expect(Set(plan.relays.map(\.key)) == [boot.key, r1.key, r2.key], "\(plan.relays)")
        let results = try await bounded(.seconds(120), "shared sync") { await SyncNetwork.syncRouted(carol, plan: plan, options: SyncOptions(scope: ReplicationScope(hops: 1))) }
        func received(_ relay: ServedRelay, in results: [RelaySyncResult]) -> Int? {
            results.filter { $0.relay.key == relay.key }.compactMap { if case .success(let r) = $0.outcome { r.eventsReceived } else { nil } }.first
        }
        let aliceEvents = Int(try #require(try alice.head(of: alice.identity.device.raw)).seq)
        let bobEvents = Int(try #require(try bob.head(of: bob.identity.device.raw)).seq)
        #expect(received(boot, in: results) == 0)
        #expect(received(r1, in: results) == aliceEvents)
        #expect(received(r2, in: results) == bobEvents)

        // Relay 1 goes away: Alice is covered by relay 3 within the same sync.
        _ = try await alice.setProfile(.bio, .text("Alice, later"))
        _ = try await bounded(.seconds(120), "alice publishes to relay 3") { try await SyncNetwork.syncByRelayLists(alice, scope: ReplicationScope(hops: 0)) }
        await r1.stop()
        let (final, all) = try await bounded(.seconds(120), "carol with relay 1 gone") {
            try await SyncNetwork.syncByRelayLists(carol, scope: ReplicationScope(hops: 1))
        }
        #expect(try Self.bio(carol, of: alice.identity.user) == "Alice, later")
        #expect(final.relays.contains { $0.key == r3.key && $0.covers.contains(alice.identity.user.raw) }, "\(final.relays)")
        let failed = all.filter { if case .failure = $0.outcome { true } else { false } }
        #expect(failed.map(\.relay.key) == [r1.key])
        for r in [boot, r2, r3] { await r.stop() }
        for n in [alice, bob, carol] { await n.close() }
    }
}
