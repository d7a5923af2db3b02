import ChorusSimulation
import ChorusTestSupport
import Foundation
import Testing

/// Specs/sync.md §8.1, §4.11, §9: a small network of listed relays in one
/// process, the same simulation as `chorus-bench network`.
@Suite("Network simulation", .closingNodes)
struct NetworkSimulationTests {
    @Test("120 users over 6 listed relays: one round delivers every followed feed, invitation and key wrap, no relay far over its share, few relays per sync")
    func smallNetworkDeliversEverything() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        var p = NetworkSimulation.Parameters(users: 120, relays: 6, directory: dir.path + "/net")
        p.chatFraction = 0.2
        p.seed = 7
        p.rounds = 1
        // One user at a time: users acting at once open and close stores on
        // the test pool's threads and starved tests running beside this one
        // (a 30 s wait in a live sync test ran out). `chorus-bench network`
        // runs them 8 at a time; HostingTests covers the race it found (an
        // invitation left for one member before another's list was known).
        p.concurrency = 1
        let r = try await NetworkSimulation.run(p)
        #expect(r.follows > 400 && r.chats > 5, "\(r.follows) follows, \(r.chats) chats")
        #expect(r.deliveryFollowsByRound == [1.0], "\(r.deliveryFollowsByRound)")
        #expect(r.deliveryInvitationsByRound == [1.0], "\(r.deliveryInvitationsByRound)")
        #expect(r.deliveryKeyWrapsByRound == [1.0], "\(r.deliveryKeyWrapsByRound)")
        #expect(r.delivery == 1.0, "\(r.misses)")
        // What can wait moves too: some followed users know their followers after one round.
        #expect(r.followersKnownByRound.count == 1 && r.followersKnownByRound[0] > 0, "\(r.followersKnownByRound)")
        #expect(r.connectionsPerSyncMean <= 8 && r.connectionsPerSyncMax <= 8)
        // Every relay holds every list (the directory exchange, Specs/sync.md
        // §4.12): no sync of the round needs a bootstrap relay to find one.
        #expect(r.connectionsByFirstReasonByRound.first?["bootstrap"] == nil, "\(r.connectionsByFirstReasonByRound)")
        // With 6 relays the random choice of homes alone puts a relay well over
        // the mean; `chorus-bench network` measures the share at scale.
        #expect(r.relayEventsMaxOverIdeal <= 2.0, "fullest relay \(r.relayEventsMax) events, ideal \(r.relayEventsIdeal)")
    }
}
