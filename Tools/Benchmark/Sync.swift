// `chorus-bench sync`: peer sync over the encrypted TCP transport against
// the machine's limits, in one run:
//   - a full sync of an empty node B from a node A holding N events from U
//     users, with pictures and their blob bytes, over 127.0.0.1: events per
//     second as a ratio to the all-core Ed25519 verify rate (target >= 0.7);
//   - bytes on the wire per event against the raw event size (the envelopes'
//     bytes), blob traffic apart (overhead target <= 10 %);
//   - the bytes two nodes already in sync with F feeds exchange on a second
//     sync, against a naive full height exchange (target < 2 %).
// Wire bytes are counted twice: by a byte-counting TCP relay between the two
// nodes (every byte TCP carried, handshake included), and per frame from the
// transport's framing (Specs/sync-transport.md §2, §4), which also splits
// blob traffic from event traffic.
import ArgumentParser
import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNode
import ChorusParallel
import ChorusProjections
import ChorusSync
import Dispatch
import ChorusSimulation
import Foundation
import Synchronization

struct SyncBenchOptions: ParsableArguments {
    @Option(help: "Events on node A.") var events = 200_000
    @Option(help: "Users writing them (a user-key feed and a device feed each).") var authors = 1_000
    @Option(help: "Pictures among them, each with real blob bytes of 2-20 KB.") var pictures = 3_000
    @Option(help: "Feeds of the already-in-sync measurement.") var feedsInSync = 10_000
    @Option(help: "Events per feed of the already-in-sync measurement.") var eventsPerFeed = 10
    @Option(help: "Events one side lacks (the last event of as many feeds) at the first-contact measurement.") var missing = 100
    @Option(help: "Seconds of the verify-rate measurement.") var seconds = 2.0
    @Option(help: "Seed of the workload.") var seed: UInt64 = 1
    @Option(help: ArgumentHelp(
        "Full syncs of A into a fresh node, each with the verify limit measured after it.",
        discussion: "The first is reported in full; with more, the table adds the median, the range and how many met the target, each run's ratio to the mean of the limits measured just before and just after it."))
    var runs = 1
    @Flag(help: ArgumentHelp(
        "Split the events between A and B, so the full sync carries half of them each way.",
        discussion: "Each node holds the feeds of the users whose key's first byte is even (A) or odd (B), a user's key feed and device feed together, and every blob, so no blob travels."))
    var bothWays = false
    @Flag(inversion: .prefixedNo, help: "Pass the traffic through a byte-counting TCP relay (--no-relay: connect directly).")
    var relay = true
    @Flag(help: "Print machine-readable JSON.") var json = false

    var minBlob: Int { 2_000 }
    var maxBlob: Int { 20_000 }

    func validate() throws {
        if events < 1_000 { throw ValidationError("--events must be at least 1,000") }
        if authors < 2 { throw ValidationError("--authors must be at least 2") }
        if pictures < 0 { throw ValidationError("--pictures must not be negative") }
        if feedsInSync < 1 || eventsPerFeed < 1 { throw ValidationError("--feeds-in-sync and --events-per-feed must be at least 1") }
        if missing < 0 || missing > feedsInSync { throw ValidationError("--missing must be between 0 and --feeds-in-sync") }
        if seconds <= 0 { throw ValidationError("--seconds must be positive") }
        if runs < 1 || runs > 100 { throw ValidationError("--runs must be between 1 and 100") }
        if bothWays && runs > 1 { throw ValidationError("--both-ways takes one run: after it A holds every event") }
    }
}

// MARK: Workload

/// A social workload of signed envelopes with picture blobs: users, each a
/// user-key feed (its device.added binding) and a device feed.
struct SyncWorkload {
    var envelopes: [[UInt8]] = []
    var blobs: [[UInt8]] = []
    var feeds = 0
    var kinds: [EventKind: Int] = [:]

    static func generate(events: Int, users userCount: Int, pictures: Int, blobSizes: ClosedRange<Int>, seed: UInt64) -> SyncWorkload {
        var rng = SeededRandom(seed: seed)
        // Keys and ids from a stream of their own, as in the projections
        // workload: a seed gives the same feeds, and so the same order of
        // authors a server serves, in every run.
        var keyRandom = Workload.keyStream(seed: seed)
        let nowMillis = UInt64(Date().timeIntervalSince1970 * 1000)
        var clock = nowMillis - UInt64(events) * 31 - 3_600_000
        struct Feed {
            let key: SigningKey
            var head: EventID? = nil
            var events: [UnsignedEvent] = []
        }
        var feeds: [Feed] = []
        var out = SyncWorkload()
        var count = 0
        func emit(_ feed: Int, _ kind: EventKind, _ object: ObjectID, _ payload: [(String, CBORValue)]) {
            clock += UInt64.random(in: 1...30, using: &rng)
            let f = feeds[feed]
            let event = try! UnsignedEvent(
                author: f.key.publicKey, seq: UInt64(f.events.count + 1), prev: f.head, hlc: HLC(physicalMillis: clock, logical: 0),
                kind: kind, object: object, payload: .textMap(payload))
            feeds[feed].head = event.id
            feeds[feed].events.append(event)
            count += 1
            out.kinds[kind, default: 0] += 1
        }
        func text(_ prefix: String, _ range: ClosedRange<Int>) -> String {
            let words = ["ok", "see you", "lol", "tonight", "photo", "great", "where", "coffee", "yes", "no", "maybe", "love it",
                         "the beach", "tomorrow", "haha", "nice", "train", "party", "music", "call me"]
            var s = prefix
            let target = Int.random(in: range, using: &rng)
            while s.utf8.count < target { s += " " + words[Int.random(in: 0..<words.count, using: &rng)] }
            return s
        }
        // Users: user-key feed with the binding, device feed with a name.
        var userKeys: [PublicKey] = []
        var devices: [Int] = []
        for u in 0..<userCount {
            let user = Workload.key(&keyRandom)
            let device = Workload.key(&keyRandom)
            feeds.append(Feed(key: user))
            feeds.append(Feed(key: device))
            userKeys.append(user.publicKey)
            devices.append(feeds.count - 1)
            emit(feeds.count - 2, .deviceAdded, device.publicKey, [
                ("proof", .bytes(DeviceBinding.proof(device: device, user: user.publicKey))), ("name", .text("phone")),
            ])
            emit(feeds.count - 1, .deviceKey, device.publicKey, [("key", .bytes(BenchSeal.agreementKey(of: device.publicKey).publicKey.bytes))])
            emit(feeds.count - 1, .profileSet, user.publicKey, [("field", .text("name")), ("value", .text("user \(u)"))])
        }
        // Chats: one per ten users, 2-8 members.
        var chats: [(id: ObjectID, members: [Int])] = []
        for _ in 0..<max(1, userCount / 10) {
            let creator = Int.random(in: 0..<userCount, using: &rng)
            var members: Set<Int> = [creator]
            for _ in 0..<Int.random(in: 1...7, using: &rng) { members.insert(Int.random(in: 0..<userCount, using: &rng)) }
            let others = members.subtracting([creator]).sorted()
            guard !others.isEmpty else { continue }
            let id = CreatedID.make(
                author: feeds[devices[creator]].key.publicKey, nonce: Array(Workload.id(&keyRandom).bytes.prefix(CreatedID.nonceBytes)))
            // Content sealed under an epoch the creator introduces to every
            // member device (Specs/encryption.md §6, step 1).
            let key = BenchSeal.epochKey(id, number: 0)
            emit(devices[creator], .chatCreated, id, [
                ("title", BenchSeal.title("chat \(chats.count)", chat: id, author: feeds[devices[creator]].key.publicKey, key: key)),
                ("members", .array(others.map { .bytes(userKeys[$0].bytes) })),
            ])
            let recipients = BenchSeal.recipients(([creator] + others).map { feeds[devices[$0]].key.publicKey })
            emit(devices[creator], .chatKey, id, BenchSeal.chatKey(chat: id, key: key, to: recipients, salt: count))
            chats.append((id, [creator] + others))
        }
        var pictureIDs: [ObjectID] = []
        let remaining = max(1, events - count)
        let pictureShare = Double(min(pictures, remaining)) / Double(remaining)
        var picturesLeft = pictures
        while count < events {
            let r = Double.random(in: 0..<1, using: &rng)
            if picturesLeft > 0, r < pictureShare || events - count <= picturesLeft {
                let u = Int.random(in: 0..<userCount, using: &rng)
                var bytes = [UInt8](repeating: 0, count: Int.random(in: blobSizes, using: &rng))
                bytes.withUnsafeMutableBytes { raw in
                    var i = 0
                    while i + 8 <= raw.count {
                        raw.storeBytes(of: rng.next(), toByteOffset: i, as: UInt64.self)
                        i += 8
                    }
                }
                bytes[0] = 0xFF; bytes[1] = 0xD8; bytes[2] = 0xFF  // a JPEG's start
                let id = CreatedID.make(
                    author: feeds[devices[u]].key.publicKey, nonce: Array(Workload.id(&keyRandom).bytes.prefix(CreatedID.nonceBytes)))
                var payload: [(String, CBORValue)] = [
                    ("blob", .bytes(Blake2b.hash256(bytes).bytes)), ("size", .unsigned(UInt64(bytes.count))),
                    ("mime", .text("image/jpeg")), ("width", .unsigned(1080)), ("height", .unsigned(1350)),
                ]
                if Bool.random(using: &rng) { payload.append(("caption", .text(text("pic", 8...80)))) }
                emit(devices[u], .pictureCreated, id, payload)
                out.blobs.append(bytes)
                pictureIDs.append(id)
                picturesLeft -= 1
                continue
            }
            let p = Double.random(in: 0..<1, using: &rng)
            if p < 0.60 || pictureIDs.isEmpty {
                let c = chats[Int.random(in: 0..<chats.count, using: &rng)]
                let sender = c.members[Int.random(in: 0..<c.members.count, using: &rng)]
                var content = MessageContent(text: text("m", 6...160))
                if !pictureIDs.isEmpty, Double.random(in: 0..<1, using: &rng) < 0.03 {
                    content.picture = pictureIDs[Int.random(in: 0..<pictureIDs.count, using: &rng)]
                }
                emit(devices[sender], .messageSent, c.id, [
                    ("body", BenchSeal.body(content, chat: c.id, author: feeds[devices[sender]].key.publicKey, key: BenchSeal.epochKey(c.id, number: 0))),
                ])
            } else if p < 0.82 {
                let u = Int.random(in: 0..<userCount, using: &rng)
                emit(devices[u], .likeAdded, pictureIDs[Int.random(in: 0..<pictureIDs.count, using: &rng)], [])
            } else if p < 0.92 {
                let u = Int.random(in: 0..<userCount, using: &rng)
                if Bool.random(using: &rng) {
                    emit(devices[u], .profileSet, userKeys[u], [("field", .text("bio")), ("value", .text(text("bio", 20...300)))])
                } else {
                    emit(devices[u], .profileSet, userKeys[u], [
                        ("field", .text("city")), ("value", .text(["Lyon", "Paris", "Rome", "Oslo", "Kyoto"][Int.random(in: 0..<5, using: &rng)])),
                    ])
                }
            } else {
                let u = Int.random(in: 0..<userCount, using: &rng)
                let target = Int.random(in: 0..<userCount, using: &rng)
                if target == u { continue }
                emit(devices[u], .followAdded, userKeys[target], [])
            }
        }
        out.feeds = feeds.count
        let jobs: [(key: SigningKey, event: UnsignedEvent)] = feeds.flatMap { f in f.events.map { (f.key, $0) } }
        out.envelopes = parallelMap(jobs, chunk: 256) { $0.event.signed(with: $0.key).encoded() }
        return out
    }

    /// F device feeds of E profile edits each (for the in-sync figure).
    static func manyFeeds(_ feedCount: Int, eventsPerFeed: Int) -> [[UInt8]] {
        let nowMillis = UInt64(Date().timeIntervalSince1970 * 1000)
        let start = nowMillis - UInt64(eventsPerFeed) * 1000 - 3_600_000
        let keys = (0..<feedCount).map { _ in SigningKey.generate() }
        let jobs: [(SigningKey, [UnsignedEvent])] = keys.map { key in
            var prev: EventID? = nil
            var list: [UnsignedEvent] = []
            for seq in 1...eventsPerFeed {
                let e = try! UnsignedEvent(
                    author: key.publicKey, seq: UInt64(seq), prev: prev, hlc: HLC(physicalMillis: start + UInt64(seq) * 1000, logical: 0),
                    kind: .profileSet, object: key.publicKey,
                    payload: .textMap([("field", .text("bio")), ("value", .text("edit \(seq) of a bio"))]))
                prev = e.id
                list.append(e)
            }
            return (key, list)
        }
        let flat: [(key: SigningKey, event: UnsignedEvent)] = jobs.flatMap { key, list in list.map { (key, $0) } }
        return parallelMap(flat, chunk: 256) { $0.event.signed(with: $0.key).encoded() }
    }
}

// MARK: Wire accounting

/// Frame-level accounting of one side's transport, both directions: each
/// frame of n bytes travels as `u32 length || frame` split into Noise
/// transport messages of at most 65519 plaintext bytes, each with a 16-byte
/// tag and a 2-byte length prefix (Specs/sync-transport.md §2, §4).
struct WireTally: Sendable {
    var frames = 0
    var frameBytes = 0
    var wireBytes = 0
    var blobFrames = 0
    var blobFrameBytes = 0
    var blobWireBytes = 0
    var eventsFrames = 0

    static func wire(frame n: Int) -> Int {
        let plain = n + 4
        let messages = max(1, (plain + SecureConnectionProtocol.maxNoisePlaintext - 1) / SecureConnectionProtocol.maxNoisePlaintext)
        return plain + messages * 18
    }

    mutating func add(_ frame: [UInt8]) {
        let w = Self.wire(frame: frame.count)
        frames += 1
        frameBytes += frame.count
        wireBytes += w
        guard frame.count >= 2 else { return }
        // Every message is a CBOR array whose first item is its code (< 24, one byte).
        let code = UInt64(frame[1])
        if code == SyncMessage.Code.events.rawValue { eventsFrames += 1 }
        if (SyncMessage.Code.blobWant.rawValue...SyncMessage.Code.blobEnd.rawValue).contains(code) {
            blobFrames += 1
            blobFrameBytes += frame.count
            blobWireBytes += w
        }
    }
}

/// Wraps a transport and tallies every frame it carries.
final class TallyingTransport: FrameTransport {
    let inner: any FrameTransport
    let tally = Mutex(WireTally())
    var peer: PeerIdentity { inner.peer }

    init(_ inner: any FrameTransport) { self.inner = inner }

    func send(_ frame: [UInt8]) async throws {
        tally.withLock { $0.add(frame) }
        try await inner.send(frame)
    }

    func receive() async throws -> [UInt8]? {
        let frame = try await inner.receive()
        if let frame { tally.withLock { $0.add(frame) } }
        return frame
    }

    func close() async { await inner.close() }
}

/// A TCP relay on 127.0.0.1 that forwards each accepted connection to a
/// target port and counts every byte in each direction.
final class CountingRelay: Sendable {
    let port: Int
    private let listenFD: Int32
    let upstream = Atomic<Int>(0)  // client -> server
    let downstream = Atomic<Int>(0)  // server -> client

    init(target: Int) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SyncBenchError.relay("socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = CountingRelay.loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw SyncBenchError.relay("bind/listen: errno \(errno)") }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        listenFD = fd
        port = Int(UInt16(bigEndian: addr.sin_port))
        let relay = self
        Thread.detachNewThread { relay.acceptLoop(target: target) }
    }

    static func loopback(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return addr
    }

    private func acceptLoop(target: Int) {
        while true {
            let client = accept(listenFD, nil, nil)
            guard client >= 0 else { return }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = CountingRelay.loopback(port: target)
            let connected = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(client)
                close(server)
                continue
            }
            var one: Int32 = 1
            setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(server, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let pending = PendingPumps()
            let relay = self
            for (from, to, up) in [(client, server, true), (server, client, false)] {
                Thread.detachNewThread {
                    relay.pump(from: from, to: to, upstream: up)
                    shutdown(to, Int32(SHUT_WR))
                    if pending.count.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                        close(client)
                        close(server)
                    }
                }
            }
        }
    }

    private final class PendingPumps: Sendable {
        let count = Atomic<Int>(2)
    }

    private func pump(from: Int32, to: Int32, upstream isUp: Bool) {
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            if isUp { upstream.add(n, ordering: .relaxed) } else { downstream.add(n, ordering: .relaxed) }
            var sent = 0
            while sent < n {
                let w = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, n - sent) }
                if w <= 0 { return }
                sent += w
            }
        }
    }

    var total: Int { upstream.load(ordering: .relaxed) + downstream.load(ordering: .relaxed) }

    func reset() {
        upstream.store(0, ordering: .relaxed)
        downstream.store(0, ordering: .relaxed)
    }

    func stop() {
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
    }
}

enum SyncBenchError: Error, CustomStringConvertible {
    case relay(String)
    case check(String)
    var description: String {
        switch self {
        case .relay(let s): "relay: \(s)"
        case .check(let s): s
        }
    }
}

// MARK: One measured sync

struct MeasuredSync {
    let report: SyncReport
    let seconds: Double
    let tally: WireTally
    /// Bytes the relay carried (nil without the relay).
    let relayBytes: Int?
}

/// Serves `server` on 127.0.0.1 (port 0) and syncs `client` with it once,
/// through the counting relay unless `relay` is false. The client session is
/// the one `SyncNetwork.sync` runs (connect with the store's transport
/// configuration, a `SyncSession` with the node's peer store), with its
/// transport wrapped to tally frames.
/// `remember: false` gives the client no peer records, so it asks for every
/// feed as at first contact (the server still remembers its peers).
func measuredSync(
    client: Node, server: Node, relay useRelay: Bool, remember: Bool = true, options: SyncOptions = SyncOptions()
) async throws -> MeasuredSync {
    let sync = try SyncServer(node: server, options: SyncOptions())
    let listener = try await sync.listen(host: "127.0.0.1", port: 0)
    let relay = useRelay ? try CountingRelay(target: listener.port) : nil
    let port = relay?.port ?? listener.port
    let t0 = Bench.clock()
    let connection = try await SecureConnection.connect(
        host: "127.0.0.1", port: port, configuration: try SyncNetwork.configuration(for: client))
    let transport = TallyingTransport(connection)
    let session = try SyncSession(
        node: client, transport: transport, options: options, peers: remember ? try PeerStore(node: client) : nil)
    let report = try await session.run()
    let seconds = Bench.clock() - t0
    await transport.close()
    await listener.shutdown()
    await sync.shutdown()
    // Let the relay see the close notifies and the connection's end.
    try? await Task.sleep(for: .milliseconds(300))
    let relayBytes = relay?.total
    relay?.stop()
    return MeasuredSync(report: report, seconds: seconds, tally: transport.tally.withLock { $0 }, relayBytes: relayBytes)
}

/// The handshake and identity proofs on the wire, both directions: XXpsk3
/// messages of 48, 96 and 64 bytes (e with its psk-mode payload tag; e, s
/// encrypted and a tag; s encrypted, a tag), each with its 2-byte length, and
/// one 96-byte proof per side in a transport message (+16 tag, +2 length).
let handshakeWireBytes = (48 + 2) + (96 + 2) + (64 + 2) + 2 * (96 + 16 + 2)
/// The close notify each side sends (u32 0xFFFFFFFF in one transport message).
let closeNotifyWireBytes = 2 * (4 + 16 + 2)

// MARK: The run

func runSyncBenchmark(_ options: SyncBenchOptions) async throws {
    let cores = ProcessInfo.processInfo.activeProcessorCount
    let scratch = NSTemporaryDirectory() + "chorus-bench-sync-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }

    // 1. Workload, signed on all cores, and node A built before any timing.
    Bench.note("generating and signing \(options.events) events from \(options.authors) users on \(cores) cores...")
    var t0 = Bench.clock()
    let workload = SyncWorkload.generate(
        events: options.events, users: options.authors, pictures: options.pictures,
        blobSizes: options.minBlob...options.maxBlob, seed: options.seed)
    let envelopes = workload.envelopes
    let rawEventBytes = envelopes.reduce(0) { $0 + $1.count }
    let blobBytes = workload.blobs.reduce(0) { $0 + $1.count }
    Bench.note("  \(envelopes.count) envelopes in \(workload.feeds) feeds, \(rawEventBytes / envelopes.count) bytes on average, "
        + "\(workload.blobs.count) blobs of \(blobBytes) bytes (\(String(format: "%.1f", Bench.clock() - t0)) s)")

    let network = NetworkConfig()
    let a = try await Node.create(at: scratch + "/a", deviceName: "A", network: network)
    let b = try await Node.create(at: scratch + "/b", deviceName: "B", network: network)
    // With --both-ways, B holds the feeds of the users whose key's first
    // byte is odd (a user's key feed and its device's feed together, as
    // each side of a real sync knows its own bindings), A the others.
    var forA = envelopes
    var forB: [[UInt8]] = []
    if options.bothWays {
        let decoded = try envelopes.map { try Event.decode($0) }
        var userOf: [PublicKey: PublicKey] = [:]
        for e in decoded where e.kind == .deviceAdded { userOf[e.object] = e.author }
        forA = []
        for (envelope, e) in zip(envelopes, decoded) {
            let user = userOf[e.author] ?? e.author
            if user.withUnsafeBytes({ $0[0] }) % 2 == 0 { forA.append(envelope) } else { forB.append(envelope) }
        }
    }
    Bench.note(options.bothWays ? "ingesting \(forA.count) events into A and \(forB.count) into B..." : "ingesting into A...")
    t0 = Bench.clock()
    for (node, name, part) in [(a, "A", forA), (b, "B", forB)] {
        var start = 0
        var accepted = 0
        while start < part.count {
            let end = min(part.count, start + 50_000)
            let report = await node.ingest(Array(part[start..<end]))
            accepted += report.accepted
            if let e = report.errors.first { throw SyncBenchError.check("\(name) refused event \(start + e.index): \(e.code): \(e.reason)") }
            start = end
        }
        guard accepted == part.count else { throw SyncBenchError.check("\(name) accepted only \(accepted) of \(part.count) events") }
    }
    for node in options.bothWays ? [a, b] : [a] {
        try node.log.env.write { txn in
            for blob in workload.blobs { _ = try node.blobs.put(blob, in: txn) }
        }
    }
    let ingestSeconds = Bench.clock() - t0
    let ingestRate = Double(envelopes.count) / ingestSeconds
    Bench.note("  A holds \(try a.log.eventCount()) events (\(String(format: "%.1f", ingestSeconds)) s)")
    // The two nodes' own device.added events also travel, one each way.
    func ownBindingBytes(_ node: Node) throws -> Int {
        guard let head = try node.log.head(of: node.identity.user.raw), let stored = try node.log.event(head.id) else { return 0 }
        return stored.event.encoded().count
    }
    let rawBytesBothWays = rawEventBytes + (try ownBindingBytes(a)) + (try ownBindingBytes(b))

    // 2. Limit: all-core Ed25519 verify of this workload's events, before
    // the full sync and again after it; the sync's ratios are to the mean
    // (this machine's speed drifts within a run).
    Bench.note("raw Ed25519 verify on \(cores) cores...")
    let verifySet = try VerifySet(envelopes: envelopes)
    let verifyBefore = verifySet.perSecond(threads: cores, seconds: options.seconds)

    // 3. Full sync of B from A over 127.0.0.1.
    Bench.note("full sync of B from A over 127.0.0.1...")
    // When B holds every event of A (the blobs follow), polled every 20 ms.
    let eventsTarget = options.bothWays ? try a.log.eventCount() + b.log.eventCount() : try a.log.eventCount() + 1
    let syncStart = Bench.clock()
    let eventsDone = Task { () -> Double? in
        while !Task.isCancelled {
            if let n = try? b.log.eventCount(), n >= eventsTarget { return Bench.clock() - syncStart }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }
    let full = try await measuredSync(client: b, server: a, relay: options.relay)
    eventsDone.cancel()
    let eventsSeconds = await eventsDone.value
    Bench.note("raw Ed25519 verify on \(cores) cores again...")
    let verifyAfter = verifySet.perSecond(threads: cores, seconds: options.seconds)
    let verifyAll = (verifyBefore + verifyAfter) / 2
    let r = full.report
    let countA = try a.log.eventCount()
    let countB = try b.log.eventCount()
    let digestA = try a.projections.digest()
    let digestB = try b.projections.digest()
    let converged = r.complete && countA == countB && digestA == digestB && r.blobsReceived == (options.bothWays ? 0 : workload.blobs.count)
    Bench.note("  received \(r.eventsReceived) events, \(r.blobsReceived) blobs; sent \(r.eventsSent); \(String(format: "%.2f", full.seconds)) s; "
        + "A \(countA) events, B \(countB); digests " + (digestA == digestB ? "equal" : "DIFFER"))
    let eventsMoved = r.eventsReceived + r.eventsSent
    let syncRate = Double(eventsMoved) / full.seconds
    // 3a. More full syncs of A, each into a fresh node, for the spread of
    // the ratio: each run's limit is the mean of the verify rates measured
    // just before it (the previous run's "after") and just after it.
    var runRatios = [syncRate / ((verifyBefore + verifyAfter) / 2)]
    var previousLimit = verifyAfter
    for run in stride(from: 2, through: options.runs, by: 1) {
        Bench.note("full sync \(run) of \(options.runs) into a fresh node...")
        let path = scratch + "/b\(run)"
        let fresh = try await Node.create(at: path, deviceName: "B\(run)", network: network)
        let again = try await measuredSync(client: fresh, server: a, relay: options.relay)
        let limitAfter = verifySet.perSecond(threads: cores, seconds: options.seconds)
        guard again.report.complete, try fresh.log.eventCount() == a.log.eventCount(),
            try fresh.projections.digest() == a.projections.digest()
        else { throw SyncBenchError.check("full sync \(run) did not converge") }
        let moved = again.report.eventsReceived + again.report.eventsSent
        runRatios.append(Double(moved) / again.seconds / ((previousLimit + limitAfter) / 2))
        Bench.note(String(format: "  %.3f of verify (%.2f s)", runRatios[runRatios.count - 1], again.seconds))
        previousLimit = limitAfter
        await fresh.close()
        try? FileManager.default.removeItem(atPath: path)
    }
    let sortedRatios = runRatios.sorted()
    let medianRatio = sortedRatios.count % 2 == 1 ? sortedRatios[sortedRatios.count / 2]
        : (sortedRatios[sortedRatios.count / 2 - 1] + sortedRatios[sortedRatios.count / 2]) / 2
    let runsMet = runRatios.filter { $0 >= 0.7 }.count
    // Wire bytes of the whole session: counted by the relay when present,
    // else the frame tally plus handshake and close notifies.
    let computedWire = full.tally.wireBytes + handshakeWireBytes + closeNotifyWireBytes
    let totalWire = full.relayBytes ?? computedWire
    let eventWire = totalWire - full.tally.blobWireBytes
    let overhead = Double(eventWire) / Double(rawBytesBothWays) - 1
    await a.close()
    await b.close()

    // 4. Two nodes already in sync with F feeds.
    Bench.note("in-sync: \(options.feedsInSync) feeds of \(options.eventsPerFeed) events, signing...")
    let small = SyncWorkload.manyFeeds(options.feedsInSync, eventsPerFeed: options.eventsPerFeed)
    let network2 = NetworkConfig()
    let c = try await Node.create(at: scratch + "/c", deviceName: "C", network: network2)
    let d = try await Node.create(at: scratch + "/d", deviceName: "D", network: network2)
    let smallReport = await c.ingest(small)
    guard smallReport.accepted == small.count else { throw SyncBenchError.check("C accepted only \(smallReport.accepted) of \(small.count)") }
    Bench.note("  first sync...")
    let first = try await measuredSync(client: d, server: c, relay: options.relay)
    guard first.report.complete, try c.log.eventCount() == d.log.eventCount() else {
        throw SyncBenchError.check("the first sync of the in-sync pair did not converge")
    }
    Bench.note("  second sync...")
    let second = try await measuredSync(client: d, server: c, relay: options.relay)
    let secondComputed = second.tally.wireBytes + handshakeWireBytes + closeNotifyWireBytes
    let secondWire = second.relayBytes ?? secondComputed
    let inSyncDigests = try c.projections.digest() == d.projections.digest()

    // First contact (no remembered position on the client): the same feeds
    // on both sides, by reconciliation and by announcing every feed; then a
    // node lacking the last event of `missing` feeds (Specs/sync.md §4.2.1).
    func wire(_ m: MeasuredSync) -> Int { m.relayBytes ?? (m.tally.wireBytes + handshakeWireBytes + closeNotifyWireBytes) }
    Bench.note("  first contact, identical stores...")
    let contact = try await measuredSync(client: d, server: c, relay: options.relay, remember: false)
    var announceAll = SyncOptions()
    announceAll.reconcile = false
    announceAll.sketch = false
    let contactAnnounced = try await measuredSync(client: d, server: c, relay: options.relay, remember: false, options: announceAll)
    Bench.note("  first contact, \(options.missing) events missing on one side...")
    var dropped = Set<Int>()
    for f in stride(from: 0, to: options.feedsInSync, by: max(1, options.feedsInSync / max(1, options.missing))).prefix(options.missing) {
        dropped.insert(f * options.eventsPerFeed + options.eventsPerFeed - 1)
    }
    let partial = small.enumerated().filter { !dropped.contains($0.offset) }.map(\.element)
    // Besides the workload, nodes hold each other's own feeds (their user
    // and device bindings): give the new node and C those first, so the
    // two differ in exactly the dropped events.
    let workloadAuthors = Set(try small.map { try Event.decode($0).author })
    func holdingTheSameFeeds(_ name: String) async throws -> Node {
        let node = try await Node.create(at: scratch + "/" + name, deviceName: name, network: network2)
        guard await node.ingest(partial).accepted == partial.count else { throw SyncBenchError.check("\(name) refused part of the workload") }
        let others = try c.arrivals().map(\.event).filter { !workloadAuthors.contains($0.author) }
        _ = await node.ingest(events: others)
        let own = try node.arrivals().map(\.event).filter { !workloadAuthors.contains($0.author) && !others.map(\.id).contains($0.id) }
        _ = await c.ingest(events: own)
        return node
    }
    let e = try await holdingTheSameFeeds("e")
    let missingRun = try await measuredSync(client: e, server: c, relay: options.relay, remember: false)
    let missingEventBytes = dropped.reduce(0) { $0 + small[$1].count }
    guard missingRun.report.complete, missingRun.report.sketched, missingRun.report.eventsReceived == dropped.count,
        missingRun.report.eventsSent == 0, try c.log.eventCount() == e.log.eventCount()
    else { throw SyncBenchError.check("the first contact with missing events did not converge by sketch, moving exactly the missing events") }
    // The same by the range-based tree (§4.2.1), for comparison.
    Bench.note("  the same by the reconciliation tree...")
    let e2 = try await holdingTheSameFeeds("e2")
    var treeOnly = SyncOptions()
    treeOnly.sketch = false
    let treeRun = try await measuredSync(client: e2, server: c, relay: options.relay, remember: false, options: treeOnly)
    guard treeRun.report.complete, treeRun.report.eventsReceived == dropped.count, try c.log.eventCount() == e2.log.eventCount() else {
        throw SyncBenchError.check("the first contact by the tree did not converge")
    }
    await e2.close()
    let contactWire = wire(contact), announcedWire = wire(contactAnnounced), missingWire = wire(missingRun), treeWire = wire(treeRun)
    // Round trips of the session's messages: hello, the reconcile rounds, done.
    let contactTrips = 2 + contact.report.reconcileRounds
    await c.close()
    await d.close()
    await e.close()
    // Naive: every feed's (author 32, seq 8, head 32) sent once, in frames of
    // `SyncLimits.listBatch` entries, each frame with its 4-byte length in
    // one Noise message (16-byte tag, 2-byte length).
    let naiveFrames = (options.feedsInSync + SyncLimits.listBatch - 1) / SyncLimits.listBatch
    let naiveBytes = options.feedsInSync * (32 + 8 + 32) + naiveFrames * (4 + 16 + 2)
    let inSyncShare = Double(secondWire) / Double(naiveBytes)

    // Report.
    let rateRatio = syncRate / verifyAll
    struct Row {
        let name: String
        let value: String
        let ratio: String
        let target: String
        let met: Bool?
    }
    func pct(_ v: Double) -> String { String(format: "%.2f %%", v * 100) }
    var rows: [Row] = [
        Row(
            name: "Ed25519 verify, \(cores) cores (limit)", value: "\(Int(verifyAll))/s (\(Int(verifyBefore)), \(Int(verifyAfter)))", ratio: "",
            target: "", met: nil),
        Row(name: "Node.ingest into A, 50,000 a call", value: "\(Int(ingestRate))/s", ratio: String(format: "%.2f", ingestRate / verifyAll),
            target: "(context)", met: nil),
        Row(name: options.bothWays ? "full sync both ways, events/s" : "full sync, events/s", value: "\(Int(syncRate))/s", ratio: String(format: "%.2f", rateRatio),
            target: "≥ 0.70 × verify", met: rateRatio >= 0.7),
        Row(name: "  events phase (until B holds them all)", value: eventsSeconds.map { "\(Int(Double(eventsMoved) / $0))/s in \(String(format: "%.1f", $0)) s" } ?? "",
            ratio: eventsSeconds.map { String(format: "%.2f", Double(eventsMoved) / $0 / verifyAll) } ?? "", target: "(context)", met: nil),
        Row(name: "wire bytes per event (blobs apart)", value: String(format: "%.1f B vs %.1f B raw", Double(eventWire) / Double(eventsMoved),
            Double(rawBytesBothWays) / Double(eventsMoved)), ratio: pct(overhead), target: "overhead ≤ 10 %", met: overhead <= 0.10),
        Row(name: "blob traffic", value: "\(full.tally.blobWireBytes) B for \(blobBytes) B", ratio: pct(Double(full.tally.blobWireBytes) / Double(blobBytes) - 1),
            target: "", met: nil),
        Row(name: "second sync, \(options.feedsInSync) feeds in sync", value: "\(secondWire) B vs \(naiveBytes) B naive",
            ratio: pct(inSyncShare), target: "< 2 % of naive", met: inSyncShare < 0.02),
        Row(name: "first contact, same \(options.feedsInSync) feeds", value: "\(contactWire) B, \(contactTrips) round trips",
            ratio: "", target: "≤ 2 KB, ≤ 4 trips", met: contactWire <= 2048 && contactTrips <= 4),
        Row(name: "  same, announcing every feed", value: "\(announcedWire) B", ratio: "", target: "(context)", met: nil),
        Row(name: "first contact, \(dropped.count) events missing", value: "\(missingWire) B (events \(missingEventBytes) B)",
            ratio: "", target: "≤ 30 KB in all", met: missingWire <= 30_000),
        Row(name: "  rounds / round trips / session time", value: "\(missingRun.report.reconcileRounds) / \(2 + missingRun.report.reconcileRounds) / "
            + String(format: "%.2f s", missingRun.seconds), ratio: "", target: "(context)", met: nil),
        Row(name: "  same, by the reconciliation tree", value: "\(treeWire) B in " + String(format: "%.2f s", treeRun.seconds), ratio: "",
            target: "(context)", met: nil),
    ]
    if runRatios.count > 1 {
        rows.insert(
            Row(name: "  full sync over \(runRatios.count) runs", value: "median, met in \(runsMet) of \(runRatios.count)",
                ratio: String(format: "%.3f", medianRatio),
                target: String(format: "range %.3f–%.3f", sortedRatios[0], sortedRatios[sortedRatios.count - 1]), met: nil),
            at: 3)
    }
    let allMet = converged && inSyncDigests

    if options.json {
        func s(_ v: Double, _ f: String = "%.3f") -> JSONValue { .string(String(format: f, v)) }
        let fields: [(String, JSONValue)] = [
            ("cores", .uint(UInt64(cores))), ("events", .uint(UInt64(envelopes.count))), ("users", .uint(UInt64(options.authors))),
            ("feeds", .uint(UInt64(workload.feeds))), ("pictures", .uint(UInt64(workload.blobs.count))), ("seed", .uint(options.seed)),
            ("both_ways", .bool(options.bothWays)),
            ("mix", .object(workload.kinds.sorted { $0.value > $1.value }.map { ($0.key.name, .uint(UInt64($0.value))) })),
            ("verify_all_cores_per_second", .uint(UInt64(verifyAll))),
            ("verify_all_cores_samples", .array([.uint(UInt64(verifyBefore)), .uint(UInt64(verifyAfter))])),
            ("ingest_into_a", .object([
                ("per_second", .uint(UInt64(ingestRate))), ("seconds", s(ingestSeconds)), ("ratio_to_verify", s(ingestRate / verifyAll)),
                ("calls_of", .uint(50_000)),
            ])),
            ("full_sync", .object([
                ("events_received", .uint(UInt64(r.eventsReceived))), ("events_sent", .uint(UInt64(r.eventsSent))),
                ("blobs_received", .uint(UInt64(r.blobsReceived))), ("seconds", s(full.seconds)),
                ("events_per_second", .uint(UInt64(syncRate))), ("ratio_to_verify", s(rateRatio)), ("target", .string("0.70")),
                ("met", .bool(rateRatio >= 0.7)), ("converged", .bool(converged)),
                ("events_phase_seconds", eventsSeconds.map { s($0) } ?? .null),
                ("events_a", .uint(UInt64(countA))), ("events_b", .uint(UInt64(countB))), ("digests_equal", .bool(digestA == digestB)),
            ])),
            ("full_sync_runs", .object([
                ("ratios_to_verify", .array(runRatios.map { s($0) })), ("median", s(medianRatio)),
                ("min", s(sortedRatios[0])), ("max", s(sortedRatios[sortedRatios.count - 1])),
                ("met", .uint(UInt64(runsMet))), ("runs", .uint(UInt64(runRatios.count))),
            ])),
            ("wire", .object([
                ("raw_event_bytes", .uint(UInt64(rawBytesBothWays))), ("total_wire_bytes", .uint(UInt64(totalWire))),
                ("relay_counted", .bool(full.relayBytes != nil)), ("computed_from_frames_bytes", .uint(UInt64(computedWire))),
                ("frame_bytes_in_report", .uint(UInt64(r.bytesSent + r.bytesReceived))), ("frames", .uint(UInt64(full.tally.frames))),
                ("events_frames", .uint(UInt64(full.tally.eventsFrames))),
                ("event_wire_bytes", .uint(UInt64(eventWire))), ("overhead", s(overhead, "%.4f")), ("target", .string("0.10")),
                ("met", .bool(overhead <= 0.10)),
                ("blob_bytes", .uint(UInt64(blobBytes))), ("blob_wire_bytes", .uint(UInt64(full.tally.blobWireBytes))),
            ])),
            ("in_sync", .object([
                ("feeds", .uint(UInt64(options.feedsInSync))), ("events_per_feed", .uint(UInt64(options.eventsPerFeed))),
                ("first_sync_wire_bytes", .uint(UInt64(first.relayBytes ?? (first.tally.wireBytes + handshakeWireBytes + closeNotifyWireBytes)))),
                ("second_sync_wire_bytes", .uint(UInt64(secondWire))), ("second_sync_computed_bytes", .uint(UInt64(secondComputed))),
                ("second_sync_frames", .uint(UInt64(second.tally.frames))), ("second_sync_frame_bytes", .uint(UInt64(second.tally.frameBytes))),
                ("naive_bytes", .uint(UInt64(naiveBytes))), ("share", s(inSyncShare, "%.5f")), ("target", .string("0.02")),
                ("met", .bool(inSyncShare < 0.02)), ("digests_equal", .bool(inSyncDigests)),
            ])),
            ("first_contact", .object([
                ("identical_wire_bytes", .uint(UInt64(contactWire))), ("identical_round_trips", .uint(UInt64(contactTrips))),
                ("identical_reconcile_rounds", .uint(UInt64(contact.report.reconcileRounds))),
                ("identical_announcing_every_feed_wire_bytes", .uint(UInt64(announcedWire))),
                ("missing_events", .uint(UInt64(dropped.count))), ("missing_wire_bytes", .uint(UInt64(missingWire))),
                ("missing_event_bytes", .uint(UInt64(missingEventBytes))),
                ("missing_reconcile_rounds", .uint(UInt64(missingRun.report.reconcileRounds))),
                ("missing_by_tree_wire_bytes", .uint(UInt64(treeWire))),
                ("missing_seconds", s(missingRun.seconds)), ("missing_by_tree_seconds", s(treeRun.seconds)),
            ])),
        ]
        print(JSONValue.object(fields).rendered())
    } else {
        func pad(_ s: String, _ n: Int) -> String { s + String(repeating: " ", count: max(0, n - s.count)) }
        print("chorus-bench sync on \(cores) cores: A holds \(envelopes.count) events from \(options.authors) users (\(workload.feeds) feeds), "
            + "\(workload.blobs.count) pictures with \(blobBytes) blob bytes; mean envelope \(rawEventBytes / envelopes.count) bytes, seed \(options.seed)")
        print("full sync B <- A over 127.0.0.1: \(r.eventsReceived) events and \(r.blobsReceived) blobs received, \(r.eventsSent) sent, "
            + "\(String(format: "%.2f", full.seconds)) s; A \(countA) events, B \(countB); digests " + (digestA == digestB ? "equal" : "DIFFER"))
        print("wire: \(totalWire) bytes " + (full.relayBytes != nil ? "counted by the TCP relay" : "computed from the frames")
            + " (frame accounting: \(computedWire)); \(full.tally.frames) frames; raw envelopes both ways \(rawBytesBothWays) bytes")
        print("in sync: \(options.feedsInSync) feeds × \(options.eventsPerFeed) events; first sync \(first.relayBytes ?? first.tally.wireBytes) bytes, "
            + "second sync \(secondWire) bytes in \(second.tally.frames) frames (frame accounting \(secondComputed))")
        print("")
        print(pad("measurement", 40) + pad("figure", 32) + pad("ratio", 10) + pad("target", 20) + "met")
        for row in rows {
            print(pad(row.name, 40) + pad(row.value, 32) + pad(row.ratio, 10) + pad(row.target, 20) + (row.met.map { $0 ? "yes" : "NO" } ?? ""))
        }
    }
    if !allMet {
        FileHandle.standardError.write(Data("the nodes did not converge\n".utf8))
        exit(1)
    }
}
