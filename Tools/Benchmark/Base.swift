// chorus-bench: measures the machine's limits and Chorus against them in one
// run, and prints each Chorus figure as a ratio to its limit, so the figures
// hold on a noisy machine. Run with `Tools/bench` (release build).
import ArgumentParser
import CLMDB
import CSodium
import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusStorage
import Dispatch
import Foundation

/// The default measurement: the machine's limits, local append and remote ingest.
struct BaseOptions: ParsableArguments {
    @Option(help: "Seconds per measurement.") var seconds = 2.0
    @Option(help: "Events in the remote ingest batch.") var ingestEvents = 20_000
    @Option(help: "Events in the batch-append measurement.") var batchEvents = 20_000
    @Option(help: "Appends timed one by one for the latency percentiles.") var latencySamples = 300
    @Flag(help: "Print machine-readable JSON.") var json = false
    var ingestAuthors: Int { 100 }

    func validate() throws {
        if seconds <= 0 { throw ValidationError("--seconds must be positive") }
        if ingestEvents < ingestAuthors { throw ValidationError("--ingest-events must be at least \(ingestAuthors)") }
        if batchEvents < 1 { throw ValidationError("--batch-events must be at least 1") }
        if latencySamples < 10 { throw ValidationError("--latency-samples must be at least 10") }
    }
}

/// Runs `body` repeatedly on `threads` threads for about `seconds`; returns operations per second.
func rate(threads: Int, seconds: Double, batch: Int = 64, _ body: @escaping @Sendable (Int) -> Void) -> Double {
    rateOfEachThread(threads: threads, seconds: seconds, batch: batch) { t in { body(t) } }
}

/// `rate`, with state of each thread's own: `perThread(t)` makes thread
/// `t`'s operation.
func rateOfEachThread(threads: Int, seconds: Double, batch: Int = 64, _ perThread: @escaping @Sendable (Int) -> () -> Void) -> Double {
    let counts = UnsafeMutableBufferPointer<Int>.allocate(capacity: threads)
    counts.initialize(repeating: 0)
    defer { counts.deallocate() }
    nonisolated(unsafe) let shared = counts
    let start = Bench.clock()
    let deadline = start + seconds
    DispatchQueue.concurrentPerform(iterations: threads) { t in
        let body = perThread(t)
        var n = 0
        while Bench.clock() < deadline {
            for _ in 0..<batch { body() }
            n += batch
        }
        shared[t] = n
    }
    return Double(counts.reduce(0, +)) / (Bench.clock() - start)
}

/// What the verify limit verifies: distinct signatures by distinct keys
/// over distinct messages, as every ingest does. Verifying one signature
/// over and over ran 3–5 % faster on the development machine
/// (Tools/Benchmark/README.md, "The verify limit"): libsodium's
/// variable-time double scalar multiplication branches on the signature's
/// scalars, and a loop over one signature, or a few, lets the branch
/// predictor learn those branches.
struct VerifySet: Sendable {
    let signatures: [[UInt8]]
    let messages: [[UInt8]]
    let keys: [PublicKey]

    /// Distinct events of a workload, `count` of them spread over it.
    init(envelopes: [[UInt8]], count: Int = 8_192) throws {
        let n = min(count, envelopes.count)
        let picked = try (0..<n).map { i in try Event.decode(envelopes[i * envelopes.count / n]) }
        signatures = picked.map(\.signature)
        messages = picked.map { Event.signedMessage(headerBytes: $0.headerBytes) }
        keys = picked.map(\.author)
    }

    /// `count` 200-byte messages, each signed by a key of its own.
    init(synthetic count: Int = 8_192) {
        let signers = (0..<count).map { _ in SigningKey.generate() }
        messages = (0..<count).map { i in [UInt8](repeating: 0x42, count: 192) + bigEndianBytes(UInt64(i)) }
        signatures = zip(signers, messages).map { $0.sign($1) }
        keys = signers.map(\.publicKey)
    }

    /// Raw `crypto_sign_verify_detached` per second on `threads` threads,
    /// each going round its own share of the set.
    func perSecond(threads: Int, seconds: Double) -> Double {
        let count = signatures.count
        return rateOfEachThread(threads: threads, seconds: seconds) { t in
            var next = t
            return {
                _ = Ed25519.verify(signature: signatures[next], message: messages[next], publicKey: keys[next])
                next += threads
                if next >= count { next = t }
            }
        }
    }

    /// The same, verifying one signature per thread over and over, which
    /// keeps the signature's data in cache and so reads higher than a
    /// stream of distinct events allows (`chorus-bench verify-limit`
    /// compares the two).
    func repeatedPerSecond(threads: Int, seconds: Double) -> Double {
        rate(threads: threads, seconds: seconds) { t in
            let i = t % signatures.count
            _ = Ed25519.verify(signature: signatures[i], message: messages[i], publicKey: keys[i])
        }
    }
}

/// The path of `name`, an executable of this package built beside
/// chorus-bench (the same build configuration), for benchmarks that run a
/// tool as its users do: in a process of its own.
func siblingExecutable(_ name: String) throws -> String {
    let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    let path = me.deletingLastPathComponent().appendingPathComponent(name).path
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw ValidationError(
            "no \(name) executable next to chorus-bench at \(path): build it with the same configuration (swift build -c release --traits Service --product \(name))")
    }
    return path
}

func temporaryDirectory(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "chorus-bench-\(name)-\(UUID().uuidString)"
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Raw LMDB: durable transactions of `batch` puts of an event-sized value
/// under increasing 8-byte keys, the least work a durable append can do.
func rawLMDBAppend(batch: Int, seconds: Double) throws -> Double {
    let dir = temporaryDirectory("lmdb")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let env = try Environment(path: dir, initialMapSize: 1 << 30)
    let db = try env.openDatabase("raw")
    let value = [UInt8](repeating: 0x5a, count: 300)
    var key: UInt64 = 0
    var written = 0
    let start = Bench.clock()
    while Bench.clock() - start < seconds {
        try env.write { txn in
            for _ in 0..<batch {
                key += 1
                try txn.put(db, withUnsafeBytes(of: key.bigEndian) { Array($0) }, value, append: true)
            }
        }
        written += batch
    }
    return Double(written) / (Bench.clock() - start)
}

func localAppend(writers: Int, seconds: Double) async throws -> Double {
    let dir = temporaryDirectory("append")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let node = try await Node.create(at: dir + "/store", network: NetworkConfig())
    let payload = CBORValue.textMap([("field", .text("bio")), ("value", .text(String(repeating: "b", count: 120)))])
    let start = Bench.clock()
    let deadline = start + seconds
    let total = try await withThrowingTaskGroup(of: Int.self) { group in
        for _ in 0..<writers {
            group.addTask {
                var n = 0
                while Bench.clock() < deadline {
                    try await node.append(.profileSet, object: node.identity.user.raw, payload: payload)
                    n += 1
                }
                return n
            }
        }
        return try await group.reduce(0, +)
    }
    let elapsed = Bench.clock() - start
    let stats = node.writerStatistics
    Bench.note("  \(writers) writers: \(total) events in \(stats.commits) commits (largest \(stats.largestBatch))")
    await node.close()
    return Double(total) / elapsed
}

/// p50 and p99 of `samples` (seconds), in milliseconds.
func percentiles(_ samples: [Double]) -> (p50: Double, p99: Double) {
    let sorted = samples.sorted()
    guard !sorted.isEmpty else { return (0, 0) }
    func at(_ q: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q))] * 1000 }
    return (at(0.5), at(0.99))
}

/// The latency of one raw durable LMDB commit of one event-sized put: the
/// floor under any acknowledged local append.
func rawCommitLatency(samples: Int) throws -> (p50: Double, p99: Double) {
    let dir = temporaryDirectory("commit")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let env = try Environment(path: dir, initialMapSize: 1 << 28)
    let db = try env.openDatabase("raw")
    let value = [UInt8](repeating: 0x5a, count: 300)
    var out: [Double] = []
    for key in 0..<UInt64(samples) {
        let start = Bench.clock()
        try env.write { txn in try txn.put(db, withUnsafeBytes(of: key.bigEndian) { Array($0) }, value, append: true) }
        out.append(Bench.clock() - start)
    }
    return percentiles(out)
}

/// The latency of one acknowledged local append with nothing else in flight.
func localAppendLatency(samples: Int) async throws -> (p50: Double, p99: Double) {
    let dir = temporaryDirectory("latency")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let node = try await Node.create(at: dir + "/store", network: NetworkConfig())
    var out: [Double] = []
    for i in 0..<samples {
        let start = Bench.clock()
        try await node.append(ProfileSetPayload(field: .bio, value: .text("latency \(i) " + String(repeating: "b", count: 110))), object: node.identity.user.raw)
        out.append(Bench.clock() - start)
    }
    await node.close()
    return percentiles(out)
}

/// `Node.appendBatch` of `count` events: events per second.
func batchAppend(count: Int) async throws -> Double {
    let dir = temporaryDirectory("batch")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let node = try await Node.create(at: dir + "/store", network: NetworkConfig())
    let items = (0..<count).map {
        PendingEvent(ProfileSetPayload(field: .bio, value: .text("batch \($0) " + String(repeating: "b", count: 110))), object: node.identity.user.raw)
    }
    let start = Bench.clock()
    try await node.appendBatch(items)
    let elapsed = Bench.clock() - start
    await node.close()
    return Double(count) / elapsed
}

func remoteIngest(events count: Int, authors: Int) async throws -> (rate: Double, accepted: Int) {
    Bench.note("signing \(count) events from \(authors) authors for the ingest run...")
    let perAuthor = count / authors
    let batches: [[[UInt8]]] = (0..<authors).map { a in
        let key = SigningKey.generate()
        var prev: EventID? = nil
        var out: [[UInt8]] = []
        for seq in 1...perAuthor {
            let e = try! Event.sign(
                with: key, seq: UInt64(seq), prev: prev, hlc: HLC(physicalMillis: 1_700_000_000_000 + UInt64(seq), logical: 0),
                kind: .profileSet, object: key.publicKey,
                payload: .textMap([("field", .text("bio")), ("value", .text("event \(seq) " + String(repeating: "c", count: 100)))]))
            prev = e.id
            out.append(e.encoded())
        }
        return out
    }
    // Interleaved as a peer would send many feeds.
    var envelopes: [[UInt8]] = []
    for i in 0..<perAuthor { for a in 0..<authors { envelopes.append(batches[a][i]) } }
    let dir = temporaryDirectory("ingest")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let node = try await Node.create(at: dir + "/store", network: NetworkConfig())
    let start = Bench.clock()
    let report = await node.ingest(envelopes)
    let elapsed = Bench.clock() - start
    await node.close()
    return (Double(envelopes.count) / elapsed, report.accepted)
}

func runBaseBenchmark(_ options: BaseOptions) async throws {
    let cores = ProcessInfo.processInfo.activeProcessorCount

    let message = [UInt8](repeating: 0x42, count: 200)
    let keys = (0..<max(cores, 1)).map { _ in SigningKey.generate() }

    Bench.note("raw Ed25519 sign and verify...")
    let signOne = rate(threads: 1, seconds: options.seconds) { t in _ = keys[t].sign(message) }
    let signAll = rate(threads: cores, seconds: options.seconds) { t in _ = keys[t].sign(message) }
    let verifySet = VerifySet(synthetic: 8_192)
    let verifyOne = verifySet.perSecond(threads: 1, seconds: options.seconds)
    let verifyAll = verifySet.perSecond(threads: cores, seconds: options.seconds)

    Bench.note("raw LMDB batched durable append...")
    let lmdbAppend = try rawLMDBAppend(batch: 1000, seconds: options.seconds)

    Bench.note("Chorus durable local append (1, 8, 64 writers)...")
    let append1 = try await localAppend(writers: 1, seconds: options.seconds)
    let append8 = try await localAppend(writers: 8, seconds: options.seconds)
    let append64 = try await localAppend(writers: 64, seconds: options.seconds)
    Bench.note("one durable append at a time: Chorus against a raw LMDB commit...")
    let rawLatency = try rawCommitLatency(samples: options.latencySamples)
    let appendLatency = try await localAppendLatency(samples: options.latencySamples)
    Bench.note("Chorus batch append of \(options.batchEvents) events...")
    let batch = try await batchAppend(count: options.batchEvents)
    Bench.note("Chorus remote ingest...")
    let ingest = try await remoteIngest(events: options.ingestEvents, authors: options.ingestAuthors)
    guard ingest.accepted == options.ingestEvents / options.ingestAuthors * options.ingestAuthors else {
        FileHandle.standardError.write(Data("ingest accepted only \(ingest.accepted) events\n".utf8))
        throw ExitCode(1)
    }

    let appendLimit = min(signAll, lmdbAppend)
    let rows: [(String, Double, String, Double?, Double?)] = [
        ("Ed25519 sign, 1 core", signOne, "/s", nil, nil),
        ("Ed25519 sign, \(cores) cores", signAll, "/s", nil, nil),
        ("Ed25519 verify, 1 core", verifyOne, "/s", nil, nil),
        ("Ed25519 verify, \(cores) cores", verifyAll, "/s", nil, nil),
        ("LMDB batched durable append", lmdbAppend, "/s", nil, nil),
        ("local append, 1 writer", append1, "/s", append1 / appendLimit, nil),
        ("local append, 8 writers", append8, "/s", append8 / appendLimit, nil),
        ("local append, 64 writers", append64, "/s", append64 / appendLimit, 0.5),
        ("batch append, \(options.batchEvents) events", batch, "/s", batch / appendLimit, nil),
        ("remote ingest, \(options.ingestEvents) events / \(options.ingestAuthors) authors", ingest.rate, "/s", ingest.rate / verifyAll, 0.8),
    ]
    let latency: [(String, (p50: Double, p99: Double))] = [
        ("raw durable LMDB commit (limit)", rawLatency), ("local append, 1 at a time", appendLatency),
    ]

    if options.json {
        let items = rows.map { r -> JSONValue in
            var fields: [(String, JSONValue)] = [("name", .string(r.0)), ("per_second", .uint(UInt64(r.1)))]
            if let ratio = r.3 { fields.append(("ratio", .string(String(format: "%.3f", ratio)))) }
            if let target = r.4 { fields.append(("target", .string(String(format: "%.2f", target)))) }
            return .object(fields)
        }
        let latencyItems = latency.map { l -> JSONValue in
            .object([
                ("name", .string(l.0)), ("p50_ms", .string(String(format: "%.3f", l.1.p50))),
                ("p99_ms", .string(String(format: "%.3f", l.1.p99))),
            ])
        }
        print(JSONValue.object([("cores", .uint(UInt64(cores))), ("results", .array(items)), ("latency", .array(latencyItems))]).rendered())
    } else {
        print("chorus-bench on \(cores) cores, \(options.seconds) s per measurement")
        print("Local append ratios are to min(all-core sign, LMDB batched append) = \(Int(appendLimit))/s;")
        print("ingest is a ratio to the all-core verify rate.")
        print("")
        func pad(_ s: String, _ n: Int) -> String { s + String(repeating: " ", count: max(0, n - s.count)) }
        print(pad("measurement", 48) + pad("per second", 14) + pad("ratio", 8) + "target")
        for r in rows {
            print(pad(r.0, 48) + pad(String(Int(r.1)), 14) + pad(r.3.map { String(format: "%.2f", $0) } ?? "", 8)
                + (r.4.map { String(format: "≥ %.2f", $0) } ?? ""))
        }
        print("")
        print(pad("latency of one acknowledged write", 48) + pad("p50 ms", 14) + pad("p99 ms", 10) + "ratio p50 / p99")
        for l in latency {
            print(pad(l.0, 48) + pad(String(format: "%.3f", l.1.p50), 14) + pad(String(format: "%.3f", l.1.p99), 10)
                + String(format: "%.2f / %.2f", l.1.p50 / rawLatency.p50, l.1.p99 / rawLatency.p99))
        }
    }
}

/// Sealed chat content and chat keys for the synthetic workloads
/// (Specs/encryption.md §3–§7): devices' X25519 keys and chats' epoch keys
/// are derived from their public keys and ids, so runs stay reproducible
/// while the bytes on the wire and in the store have the real shape and size.
enum BenchSeal {
    /// Sealed under the epoch key `key`, which the workload introduces with
    /// a `chat.key` (Specs/encryption.md §5).
    static func sealed(
        _ plaintext: [UInt8], kind: EventKind, chat: ObjectID, object: ObjectID, author: PublicKey, key: [UInt8]
    ) -> CBORValue {
        .bytes(ChatCrypto.seal(
            plaintext, epochKey: key, epoch: ChatCrypto.epochID(chat: chat, key: key),
            kind: kind, chat: chat, object: object, author: author))
    }

    static func title(_ title: String, chat: ObjectID, author: PublicKey, key: [UInt8]) -> CBORValue {
        sealed(TitleContent.encode(title), kind: .chatCreated, chat: chat, object: chat, author: author, key: key)
    }

    static func body(_ content: MessageContent, chat: ObjectID, author: PublicKey, key: [UInt8]) -> CBORValue {
        sealed(content.encoded(), kind: .messageSent, chat: chat, object: chat, author: author, key: key)
    }

    static func edit(_ text: String, chat: ObjectID, message: ObjectID, author: PublicKey, key: [UInt8]) -> CBORValue {
        sealed(MessageContent(text: text).encoded(), kind: .messageEdited, chat: chat, object: message, author: author, key: key)
    }

    /// A device's X25519 key for the workloads, derived from its signing key
    /// so that runs stay reproducible without drawing from the key stream.
    static func agreementKey(of device: PublicKey) -> AgreementKey {
        // A BLAKE2b output is a valid X25519 secret (it is clamped when used).
        AgreementKey(secret: Blake2b.hash256(Array("chorus-bench agreement".utf8) + device.bytes).bytes)!
    }

    /// Each device as the recipient of a `chat.key`, with its workload X25519 key.
    static func recipients(_ devices: [PublicKey]) -> [ChatCrypto.Recipient] {
        devices.map { ChatCrypto.Recipient(device: $0, encryptionKey: agreementKey(of: $0).publicKey) }
    }

    /// The `n`th epoch key of a chat (Specs/encryption.md §4), derived like the rest.
    static func epochKey(_ chat: ObjectID, number: Int) -> [UInt8] {
        Blake2b.hash256(Array("chorus-bench epoch".utf8) + chat.bytes + withUnsafeBytes(of: UInt64(number).bigEndian, Array.init)).bytes
    }

    /// A `chat.key` payload wrapping `key` to `recipients` (Specs/encryption.md §5).
    /// `salt` makes the ephemeral key one per event (the workload's event count).
    static func chatKey(chat: ObjectID, key: [UInt8], to recipients: [ChatCrypto.Recipient], salt: Int) -> [(String, CBORValue)] {
        let ephemeral = AgreementKey(
            secret: Blake2b.hash256(Array("chorus-bench ephemeral".utf8) + key + withUnsafeBytes(of: UInt64(salt).bigEndian, Array.init)).bytes)!
        let epoch = ChatCrypto.epochID(chat: chat, key: key)
        let wraps = ChatCrypto.wrap(epochKey: key, chat: chat, epoch: epoch, to: recipients, ephemeral: ephemeral)!
        return [("epoch", .bytes(epoch.bytes)), ("ephemeral", .bytes(ephemeral.publicKey.bytes)), ("wraps", .bytes(wraps))]
    }
}
