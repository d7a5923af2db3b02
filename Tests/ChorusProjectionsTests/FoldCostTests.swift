import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusTestSupport
import Testing

/// What an event's fold reads is bounded by what it changes, not by how many
/// events name its object (Specs/projections.md §9.1): otherwise a peer could
/// name one object with event after event, each costing every node that folds
/// them more than the last. Counted in facts read back, not timed.
@Suite("Fold cost: an event's fold does not read the events that named its object before")
struct FoldCostTests {
    @Test("a device.key reads none of the keys named for its device before, by others or by the device")
    func deviceKeys() throws {
        let replica = try Replica(config: NetworkConfig())
        let device = FeedWriter(SigningKey.generate())
        let stranger = FeedWriter(SigningKey.generate())
        var random = SplitMix64(seed: 63)
        func key(_ writer: FeedWriter) throws -> Event {
            try writer.sign(.deviceKey, device.publicKey, [("key", .bytes(random.bytes(32)))], nowMillis: Replica.nowMillis - 10_000)
        }
        let first = try key(device)
        try replica.deliver([first])
        var junk: [Event] = []
        for _ in 0..<200 {
            junk.append(try key(stranger))
            try replica.deliver([junk[junk.count - 1]])
        }
        let before = replica.projections.factsReadByFolds.value
        let late = try key(stranger)
        let second = try key(device)
        try replica.deliver([late])
        try replica.deliver([second])
        #expect(replica.projections.factsReadByFolds.value == before, "the folds read facts of the device's earlier keys")
        // And decided as folding the device's keys whole decides them.
        #expect(try replica.projections.encryptionKey(of: device.publicKey)?.event == first.id)
        #expect(try replica.projections.noEffect(of: second)?.code == "already_published")
        #expect(try replica.projections.noEffect(of: late)?.code == "not_owner")
        #expect(try replica.projections.noEffect(of: first) == nil)
        let incremental = try replica.digest()
        try replica.store.rebuild()
        #expect(try replica.digest() == incremental)
    }
}
