import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation
import Testing

/// Scoped announcements (Specs/sync.md §4.10): a node that replicates a
/// limited scope pays for its scope at first contact, not for the relay's size.
@Suite("Scoped first contact", .closingNodes)
struct ScopedSyncTests {
    /// A relay of `relayFeeds` feeds and a phone following `followed` of them.
    static func world(_ dir: SyncTempDir, relayFeeds: Int, followed: Int, phoneHolds: Bool) async throws -> (relay: Node, phone: Node, followedUsers: [PublicKey]) {
        let net = testNetwork()
        let relay = try await makeNode(dir, "relay", network: net)
        let phone = try await makeNode(dir, "phone", network: net)
        let events = try manyEvents(feeds: relayFeeds, perFeed: 1, padding: 0, seed: 7)
        #expect(await relay.ingest(events: events).accepted == relayFeeds)
        let users = events.prefix(followed).map(\.author)
        if phoneHolds { #expect(await phone.ingest(events: Array(events.prefix(followed))).accepted == followed) }
        for u in users { _ = try await phone.follow(UserID(u)) }
        return (relay, phone, users)
    }

    static func scoped(_ hops: Int, scopedAnnouncements: Bool = true) -> SyncOptions {
        var o = SyncOptions.patient
        o.scope = ReplicationScope(hops: hops)
        o.scoped = scopedAnnouncements
        return o
    }

    @Test("a phone following 20 of a relay's 3,000 feeds pays for its scope at first contact (2 KB + 150 bytes a feed), under 1 KB once in sync")
    func firstContactCostsTheScope() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let (relay, phone, _) = try await Self.world(dir, relayFeeds: 3000, followed: 20, phoneHolds: true)
        let scopeFeeds = try #require(try ReplicationScope(hops: 1).feeds(of: phone)).count
        // The phone's own events move once; then a first contact (nothing
        // remembered) of two nodes holding the same scope costs the protocol alone.
        let (moving, _) = try await syncPair(phone, relay, optionsA: Self.scoped(1), remember: false)
        #expect(moving.complete && moving.eventsSent > 20)
        let (first, _) = try await syncPair(phone, relay, optionsA: Self.scoped(1), remember: false)
        #expect(first.complete && first.reconciled && first.eventsSent == 0 && first.eventsReceived == 0)
        let firstBytes = first.bytesSent + first.bytesReceived
        // The issue's target: 2 KB plus 150 bytes per in-scope feed, whatever the relay holds.
        #expect(firstBytes <= 2048 + 150 * scopeFeeds, "\(firstBytes) bytes for \(scopeFeeds) feeds in scope")
        // Remembered positions: a sync in sync costs a few hundred bytes.
        _ = try await syncPair(phone, relay, optionsA: Self.scoped(1))
        let (again, _) = try await syncPair(phone, relay, optionsA: Self.scoped(1))
        #expect(again.complete && again.bytesSent + again.bytesReceived < 1024, "\(again.bytesSent + again.bytesReceived) bytes in sync")
        // Without scoped announcements the relay announced every feed.
        let other = SyncTempDir()
        defer { other.cleanup() }
        let (relay2, phone2, _) = try await Self.world(other, relayFeeds: 3000, followed: 20, phoneHolds: true)
        _ = try await syncPair(phone2, relay2, optionsA: Self.scoped(1), remember: false)
        let (unscoped, _) = try await syncPair(phone2, relay2, optionsA: Self.scoped(1, scopedAnnouncements: false), remember: false)
        #expect(unscoped.bytesSent + unscoped.bytesReceived > 20 * firstBytes)
        print("scoped first contact: \(firstBytes) bytes for \(scopeFeeds) feeds in scope of 3,000; in sync \(again.bytesSent + again.bytesReceived); without scoped announcements \(unscoped.bytesSent + unscoped.bytesReceived)")
        for n in [relay, phone, relay2, phone2] { await n.close() }
    }

    @Test("the scoped phone receives exactly its scope, and the relay its own feeds")
    func theScopeArrivesWhole() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let (relay, phone, users) = try await Self.world(dir, relayFeeds: 500, followed: 12, phoneHolds: false)
        let (r, _) = try await syncPair(phone, relay, optionsA: Self.scoped(1))
        #expect(r.complete && r.eventsReceived == 12)
        for u in users { #expect(try phone.head(of: u) == relay.head(of: u)) }
        #expect(try phone.heads().count == 12 + 2)  // the followed feeds, the phone's user key and device
        #expect(try relay.head(of: phone.identity.device.raw) == phone.head(of: phone.identity.device.raw))
        for n in [relay, phone] { await n.close() }
    }

    @Test("a scope that grows during the session (a follow of a follow) is announced and fetched in the same sync")
    func aGrowingScopeIsAnsweredInTheSameSession() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let relay = try await makeNode(dir, "relay", network: net)
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        let phone = try await makeNode(dir, "phone", network: net)
        #expect(await relay.ingest(events: try manyEvents(feeds: 300, perFeed: 1, padding: 0, seed: 3)).accepted == 300)
        _ = try await bob.setProfile(.bio, .text("two hops away"))
        _ = try await alice.follow(bob.identity.user)
        for n in [alice, bob] { _ = try await syncPair(n, relay) }
        _ = try await phone.follow(alice.identity.user)
        let (r, _) = try await syncPair(phone, relay, optionsA: Self.scoped(2))
        #expect(r.complete)
        guard case .text(let bio) = try phone.projections.profile(bob.identity.user).field("bio") else {
            Issue.record("Bob's profile did not arrive within the session")
            return
        }
        #expect(bio == "two hops away")
        let held = try phone.heads().count
        #expect(held < 20, "only the scope: \(held) feeds")
        for n in [relay, alice, bob, phone] { await n.close() }
    }
}
