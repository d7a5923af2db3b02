import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation
import Testing

/// Specs/sync.md §9: the plan a node makes from the relay lists it holds.
/// No relay runs: a plan is a function of the store, so these tests make
/// plans and read them; the suite trait closes the nodes.
@Suite("The relay plan, made from relay lists", .closingNodes)
struct RelayPlanTests {
    /// A relay nobody serves: a plan only names it.
    static func relay(_ n: Int, _ roles: Relay.Roles) -> Relay {
        Relay(address: "127.0.0.1:\(9000 + n)", key: Bytes32([UInt8](repeating: UInt8(n), count: 32))!, roles: roles)
    }

    /// Gives `node` the relay lists (the user keys' feeds) of `users`.
    static func learnLists(_ node: Node, of users: [Node]) async throws {
        for user in users {
            let envelopes = try user.feedEnvelopes(user.identity.user.raw, fromSeq: 1, limit: .max).map(\.envelope)
            _ = await node.ingest(envelopes)
        }
    }

    @Test("a node looks lists up at its own relay, then at one bootstrap relay, chosen by its user key, once every bootstrap relay holds its own list")
    func oneBootstrapRelayForLookups() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        var net = testNetwork()
        let boots = (1...3).map { Self.relay($0, .all) }
        net.bootstrapRelays = boots.map { BootstrapRelay(address: $0.address, key: $0.key) }
        let alice = try await makeNode(dir, "alice", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        _ = try await carol.setRelays([Self.relay(10, .all)])
        _ = try await carol.follow(alice.identity.user)
        // Its list not yet published: every bootstrap relay is in the plan.
        let publishing = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1))
        #expect(Set(publishing.relays.filter { $0.reasons.contains("bootstrap") }.map(\.key)) == Set(boots.map(\.key)))
        // Every bootstrap relay took the list: Alice's list, missing here, is
        // looked up at Carol's own relay (it holds the directory, §4.12) ...
        let heights = OwnHeights(
            device: try #require(try carol.head(of: carol.identity.device.raw)).seq, user: try #require(try carol.head(of: carol.identity.user.raw)).seq)
        try await RoutingMemory(node: carol).endSync(covered: [], offered: Dictionary(uniqueKeysWithValues: boots.map { ($0.key, heights) }))
        let own = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1))
        #expect(own.relays.map(\.reasons) == [["own"]], "\(own.relays)")
        #expect(own.unlisted == [alice.identity.user.raw])
        // ... and, once that relay did not know it, at one bootstrap relay.
        let lookup = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1), askedOwn: [alice.identity.user.raw])
        let chosen = boots[Int(carol.identity.user.raw.bytes[0]) % boots.count]
        #expect(lookup.relays.filter { $0.reasons.contains("bootstrap") }.map(\.key) == [chosen.key], "\(lookup.relays)")
        #expect(lookup.unlisted == [alice.identity.user.raw])
        // That relay failed earlier in the sync: another one is asked.
        let failover = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1), avoiding: [chosen.key], askedOwn: [alice.identity.user.raw])
        let other = try #require(failover.relays.first { $0.reasons.contains("bootstrap") })
        #expect(other.key != chosen.key && boots.contains { $0.key == other.key })
        // With Alice's list held, no bootstrap relay is needed.
        _ = try await alice.setRelays([Self.relay(20, .all)])
        try await Self.learnLists(carol, of: [alice])
        let known = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1), askedOwn: [alice.identity.user.raw])
        #expect(!known.relays.contains { $0.reasons.contains("bootstrap") }, "\(known.relays)")
    }

    @Test("what can wait adds its relay on the node's turn, every other sync")
    func whatCanWaitOnItsTurn() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let carol = try await makeNode(dir, "carol", network: net)
        // Alice lives on relay 1 and reads at 5; Bob lives on 4 and reads at 3.
        _ = try await alice.setRelays([Self.relay(1, .home), Self.relay(5, .inbox)])
        _ = try await bob.setRelays([Self.relay(4, .home), Self.relay(3, .inbox)])
        try await Self.learnLists(carol, of: [alice, bob])
        // Carol follows both: her follows wait to be left at relays 5 and 3.
        _ = try await carol.follow(alice.identity.user)
        _ = try await carol.follow(bob.identity.user)
        func keys(_ relays: Int...) -> Set<PublicKey> { Set(relays.map { Self.relay($0, .all).key }) }
        let memory = try RoutingMemory(node: carol)
        // Carol's turn comes at the first or the second sync, by her key.
        if !RelayPlan.isWaitingTurn(of: carol.identity.user, at: try memory.syncs()) { try await memory.endSync(covered: []) }
        // On her turn relays 1 and 4 bring Alice and Bob, and one relay
        // more takes a follow (relay 3: as many wait there as at 5, and its key is smaller).
        let turn = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1))
        #expect(Set(turn.relays.map(\.key)) == keys(1, 3, 4), "\(turn.relays)")
        #expect(turn.addedForWhatCanWait)
        // A later round of the same sync adds no second one.
        #expect(!(try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1), extra: false).addedForWhatCanWait))
        // The next sync is not her turn: the follows wait.
        try await memory.endSync(covered: [])
        let next = try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1))
        #expect(Set(next.relays.map(\.key)) == keys(1, 4), "\(next.relays)")
        #expect(!next.addedForWhatCanWait)
        // The one after is again.
        try await memory.endSync(covered: [])
        #expect(try RelayPlan.make(for: carol, scope: ReplicationScope(hops: 1)).addedForWhatCanWait)
        // Turns spread over a network's nodes: a key whose first byte is odd takes the other syncs.
        #expect(RelayPlan.isWaitingTurn(of: UserID(try #require(PublicKey([0] + Array(repeating: 1, count: 31)))), at: 0))
        #expect(!RelayPlan.isWaitingTurn(of: UserID(try #require(PublicKey([1] + Array(repeating: 1, count: 31)))), at: 0))
    }
}

