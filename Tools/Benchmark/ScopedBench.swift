import ArgumentParser
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation

struct ScopedBenchOptions: ParsableArguments {
    @Option(help: "Feeds the relay holds (one event each).") var relayFeeds = 10_000
    @Option(help: "Users of the relay the scoped node follows (its scope is these, its own user key and device).") var follows = 300
    @Flag(help: "Also measure the same first contact without scoped announcements (every feed announced).") var compare = false
    @Flag(help: "Print machine-readable JSON.") var json = false
    func validate() throws {
        if relayFeeds < 1 || follows < 1 || follows > relayFeeds { throw ValidationError("need 1 <= --follows <= --relay-feeds") }
    }
}

/// The bytes a node with a limited scope exchanges with a relay that holds
/// far more (Specs/sync.md §4.10), against the target of 2 KB plus 150
/// bytes per feed in scope at first contact and under 1 KB in sync.
struct ScopedBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scoped",
        abstract: "Bytes on the wire when a node replicating a scope of S feeds meets a relay of N feeds.",
        discussion: """
            Builds a relay holding --relay-feeds feeds of one event each and a node that follows --follows of \
            their users and already holds their events (--hops 1), then runs in-process sessions: one that \
            moves the node's own events, a first contact (nothing remembered on either side) between nodes \
            that agree on the scope, and two remembered syncs, the second of them in sync. Reports the \
            bytes of the first contact and of the sync in sync against their targets.
            """)
    @OptionGroup var options: ScopedBenchOptions
    func run() async throws { try await runScopedBenchmark(options) }
}

func runScopedBenchmark(_ options: ScopedBenchOptions) async throws {
    let dir = temporaryDirectory("scoped")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let network = NetworkConfig(networkKey: Random.bytes32())
    let relay = try await Node.create(at: dir + "/relay", deviceName: "relay", network: network)
    let phone = try await Node.create(at: dir + "/phone", deviceName: "phone", network: network)
    Bench.note("signing and storing \(options.relayFeeds) feeds on the relay...")
    let base = UInt64(Date().timeIntervalSince1970 * 1000) - 1_000_000
    var followed: [Event] = []
    var batch: [Event] = []
    for f in 0..<options.relayFeeds {
        let key = SigningKey.generate()
        let e = try Event.sign(
            with: key, seq: 1, prev: nil, hlc: HLC(physicalMillis: base + UInt64(f % 1000), logical: 0), kind: .profileSet,
            object: key.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text("feed \(f)"))]))
        batch.append(e)
        if f < options.follows { followed.append(e) }
        if batch.count == 20_000 {
            _ = await relay.ingest(events: batch)
            batch = []
        }
    }
    _ = await relay.ingest(events: batch)
    _ = await phone.ingest(events: followed)
    for e in followed { _ = try await phone.follow(UserID(e.author)) }
    var scoped = SyncOptions()
    scoped.scope = ReplicationScope(hops: 1)
    let scope = try scoped.scope.feeds(of: phone)?.count ?? 0

    func session(_ a: SyncOptions, remember: Bool) async throws -> SyncReport {
        let (ta, tb) = MemoryTransport.pair(phone.identity.device.raw, relay.identity.device.raw, capacity: 16)
        let sa = try SyncSession(node: phone, transport: ta, options: a, peers: remember ? try PeerStore(node: phone) : nil)
        let sb = try SyncSession(node: relay, transport: tb, peers: remember ? try PeerStore(node: relay) : nil)
        async let ra = sa.run()
        async let rb = sb.run()
        _ = try await rb
        return try await ra
    }
    _ = try await session(scoped, remember: false)  // the node's own events move
    let first = try await session(scoped, remember: false)
    var unscopedBytes: Int? = nil
    if options.compare {
        var off = scoped
        off.scoped = false
        let r = try await session(off, remember: false)
        unscopedBytes = r.bytesSent + r.bytesReceived
    }
    _ = try await session(scoped, remember: true)
    let inSync = try await session(scoped, remember: true)
    let firstBytes = first.bytesSent + first.bytesReceived
    let inSyncBytes = inSync.bytesSent + inSync.bytesReceived
    let target = 2048 + 150 * scope
    let perFeed = Double(max(0, firstBytes - 2048)) / Double(max(1, scope))
    if options.json {
        var fields: [String] = [
            "\"relay_feeds\": \(options.relayFeeds)", "\"scope_feeds\": \(scope)", "\"first_contact_bytes\": \(firstBytes)",
            "\"first_contact_target_bytes\": \(target)", "\"first_contact_bytes_per_scope_feed\": \(String(format: "%.1f", perFeed))",
            "\"in_sync_bytes\": \(inSyncBytes)", "\"first_contact_frames\": \(first.framesSent + first.framesReceived)",
        ]
        if let unscopedBytes { fields.append("\"unscoped_first_contact_bytes\": \(unscopedBytes)") }
        print("{" + fields.joined(separator: ", ") + "}")
    } else {
        print("relay feeds             \(options.relayFeeds)")
        print("feeds in scope          \(scope)")
        print("first contact           \(firstBytes) bytes, \(first.framesSent + first.framesReceived) frames (target \(target): \(firstBytes <= target ? "met" : "missed"); \(String(format: "%.1f", perFeed)) bytes a feed over 2 KB)")
        print("in sync                 \(inSyncBytes) bytes (target 1024: \(inSyncBytes < 1024 ? "met" : "missed"))")
        if let unscopedBytes { print("every feed announced    \(unscopedBytes) bytes") }
    }
    await phone.close()
    await relay.close()
}
