// Alice's and Bob's nodes in one network, synced in memory: what the
// benchmarks of chats between two users start from.
import ChorusCrypto
import ChorusNode
import ChorusProjections
import ChorusSync

struct TwoNodes {
    let alice: Node
    let bob: Node

    /// Creates both nodes under `dir` and syncs them once, so each knows
    /// the other's user, devices and keys.
    init(at dir: String) async throws {
        let network = NetworkConfig(networkKey: Random.bytes32())
        alice = try await Node.create(at: dir + "/alice", deviceName: "alice", network: network)
        bob = try await Node.create(at: dir + "/bob", deviceName: "bob", network: network)
        try await sync()
    }

    /// One sync between the two over an in-memory transport, to its end.
    func sync() async throws {
        let (ta, tb) = MemoryTransport.pair(alice.identity.device.raw, bob.identity.device.raw, capacity: 16)
        let sa = try SyncSession(node: alice, transport: ta)
        let sb = try SyncSession(node: bob, transport: tb)
        async let ra = sa.run()
        async let rb = sb.run()
        _ = try await (ra, rb)
    }

    func close() async {
        await alice.close()
        await bob.close()
    }
}
