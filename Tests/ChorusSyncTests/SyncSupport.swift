import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Logging
import Synchronization
import Testing

/// A fresh directory under the system temp dir, removed by `cleanup`.
struct SyncTempDir {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "chorus-sync-test-" + UUID().uuidString
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func store(_ name: String) -> String { path + "/" + name }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

struct SyncTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// One network configuration shared by every node of a test.
func testNetwork() -> NetworkConfig { NetworkConfig(networkKey: Random.bytes32()) }

func makeNode(_ dir: SyncTempDir, _ name: String, network: NetworkConfig) async throws -> Node {
    opened(try await Node.create(at: dir.store(name), deviceName: name, network: network))
}


/// Runs a symmetric session between two nodes over an in-memory pair.
@discardableResult
func syncPair(
    _ a: Node, _ b: Node, optionsA: SyncOptions = SyncOptions.patient, optionsB: SyncOptions = SyncOptions.patient,
    capacity: Int = 16, cutAfterFrames: Int? = nil, remember: Bool = true
) async throws -> (SyncReport, SyncReport) {
    let (ta, tb) = MemoryTransport.pair(a.identity.device.raw, b.identity.device.raw, capacity: capacity, cutAfterFrames: cutAfterFrames)
    let sa = try SyncSession(node: a, transport: ta, options: optionsA, peers: remember ? try PeerStore(node: a) : nil)
    let sb = try SyncSession(node: b, transport: tb, options: optionsB, peers: remember ? try PeerStore(node: b) : nil)
    return try await bounded(.seconds(120), "sync") {
        async let ra = sa.run()
        async let rb = sb.run()
        return (try await ra, try await rb)
    }
}

/// Both results of a session pair, errors included (for fault tests).
func syncPairResults(
    _ a: Node, _ b: Node, cutAfterFrames: Int? = nil, capacity: Int = 16
) async throws -> (Result<SyncReport, any Error>, Result<SyncReport, any Error>) {
    let (ta, tb) = MemoryTransport.pair(a.identity.device.raw, b.identity.device.raw, capacity: capacity, cutAfterFrames: cutAfterFrames)
    let sa = try SyncSession(node: a, transport: ta, options: .patient, peers: try PeerStore(node: a))
    let sb = try SyncSession(node: b, transport: tb, options: .patient, peers: try PeerStore(node: b))
    return try await bounded(.seconds(120), "sync") {
        async let ra: Result<SyncReport, any Error> = { do { return .success(try await sa.run()) } catch { return .failure(error) } }()
        async let rb: Result<SyncReport, any Error> = { do { return .success(try await sb.run()) } catch { return .failure(error) } }()
        return (await ra, await rb)
    }
}

/// Polls `condition` until it holds or `limit` passes.
func eventually(_ limit: Duration = .seconds(120), _ condition: () throws -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try condition()
}

/// Every feed as (author, seq, head id), sorted.
func feedHeads(_ node: Node) throws -> [String] {
    try node.heads().map { "\($0.author.hex):\($0.head.seq):\($0.head.id.hex)" }
}

func digest(_ node: Node) throws -> String { try node.projections.digest().hex }

/// A small image-like byte string, distinct per seed.
func pictureBytes(_ seed: Int, size: Int = 3000) -> [UInt8] {
    var g = SplitMix64(seed: UInt64(seed) &+ 7)
    return (0..<size).map { _ in UInt8(truncatingIfNeeded: g.next()) }
}


/// A logger whose lines (message, then `key=value` metadata) go to `lines`.
func collectingLogger(_ lines: LogLines) -> Logger {
    Logger(label: "test") { _ in CollectingLogHandler(lines: lines) }
}

struct CollectingLogHandler: LogHandler {
    let lines: LogLines
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        lines.append(([ "\(event.message)" ] + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }).joined(separator: " "))
    }
}

/// A relay node serving sync on a free port of 127.0.0.1.
struct ServedRelay {
    let node: Node
    let server: SyncServer
    let listener: SecureListener
    var address: String { "127.0.0.1:\(listener.port)" }
    var key: PublicKey { node.identity.device.raw }
    /// This relay in a relay list, with `roles`.
    func relay(_ roles: Relay.Roles) -> Relay { Relay(address: address, key: key, roles: roles) }

    /// A new node `name` serving with `options` (`chorus serve`'s by
    /// default), waiting for a hello as long as `SyncOptions.patient` does.
    static func start(
        _ dir: SyncTempDir, _ name: String, network: NetworkConfig, options: SyncOptions = .relay(hostsListed: false)
    ) async throws -> ServedRelay {
        let node = try await makeNode(dir, name, network: network)
        var options = options
        options.helloTimeout = SyncOptions.patient.helloTimeout
        let server = try SyncServer(node: node, options: options)
        let relay = ServedRelay(node: node, server: server, listener: try await server.listen(host: "127.0.0.1", port: 0))
        OpenedInTest.current?.add { await relay.stop() }
        return relay
    }

    func stop() async {
        await listener.shutdown()
        await server.shutdown()
        await node.close()
    }
}

extension SyncOptions {
    /// The defaults with a hello limit a loaded machine does not reach: with
    /// the whole suite on two cores, a session's peer task can start seconds
    /// late. Tests of the limit itself set their own.
    static var patient: SyncOptions { patient(live: false) }

    /// `patient`, live or not.
    static func patient(live: Bool) -> SyncOptions {
        var options = SyncOptions(live: live)
        options.helloTimeout = .seconds(120)
        return options
    }
}
