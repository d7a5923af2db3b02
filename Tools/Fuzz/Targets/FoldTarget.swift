import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import Foundation
import Synchronization

/// Signed events of any kind with any payload their schema accepts, as any
/// peer may make them (Specs/projections.md §2: every validly signed event
/// that fits its feed is stored and folded), ingested by one node: the folds
/// and queries must answer whatever the payloads hold (extreme amounts,
/// slots, positions, times, references to what does not exist).
///
/// An input is a run of events, each `kind ‖ signer ‖ object ‖ clock step ‖
/// u16be(length) ‖ payload CBOR`: the kind indexes `EventKind.known`, the
/// signer one of three keys (the first is the network's coin issuer), the
/// object one of a few fixed ids (bound or not), the signers' keys or the ids of the
/// input's earlier events; the clock step moves the events' HLC. A payload
/// that is not canonical CBOR or breaks its schema is skipped (ingest refuses
/// it before any fold). One node takes `freshStoreEvery` inputs, then a
/// fresh one takes over: a store that only grew made every input slower
/// than the last, and its coin supply (limited to a few of the largest
/// credits here, Specs/projections.md §6.9) stayed spent after the first
/// few, so the folds near the limit ran only at the start of a campaign.
final class FoldFuzzing: Sendable {
    let keys: [SigningKey]
    let directory: URL
    let network: NetworkConfig
    /// The node, each signer's next sequence number and previous id, and
    /// the clock, held for a whole input: inputs run one at a time (the
    /// tests run several targets at once), or two would sign at one position.
    private let feeds: Mutex<Feeds>

    struct Feeds {
        var node: Node
        var heads: [(seq: UInt64, prev: EventID?)]
        var clock: UInt64
        /// Inputs folded so far: every `rebuildEvery`-th is checked against a rebuild.
        var runs = 0
        /// How many nodes have taken inputs (each in a directory of its own).
        var stores = 1
    }

    /// Inputs one node folds before a fresh one takes over.
    static let freshStoreEvery = 1_024

    /// How often the state folded one write at a time is compared with a
    /// rebuild of the same log (Specs/projections.md §9.2: they must be
    /// equal). The first divergent check names the input that folded last;
    /// the inputs before it in the corpus lead there.
    static let rebuildEvery = 64

    static let shared: FoldFuzzing = {
        do { return try SessionFuzzing.wait { try await FoldFuzzing() } } catch { fatalError("fold fuzzing: cannot make the node: \(error)") }
    }()

    init() async throws {
        let keys = (1...3).compactMap { SigningKey(seed: [UInt8](repeating: UInt8($0), count: 32)) }
        let directory = FuzzStores.directory("fold")
        let network = NetworkConfig(
            issuers: [keys[0].publicKey], slotPrices: NetworkConfig.defaultSlotPrices, networkKey: Random.bytes32(), bootstrapRelays: [])
        (self.keys, self.directory, self.network) = (keys, directory, network)
        let node = try await Self.makeNode(in: directory, number: 1, network: network)
        // A minute back, so that a run of clock steps stays within the drift.
        feeds = Mutex(
            Feeds(
                node: node, heads: keys.map { _ in (1, nil) },
                clock: HLC(physicalMillis: UInt64(Date().timeIntervalSince1970 * 1000) - 60_000, logical: 0).rawValue))
    }

    static func makeNode(in directory: URL, number: Int, network: NetworkConfig) async throws -> Node {
        var options = NodeOptions()
        options.supplyLimit = Int64(PayloadLimits.maxCoinAmount) * 4
        return try await Node.create(at: directory.appendingPathComponent("node-\(number)"), deviceName: "fold", network: network, options: options)
    }

    /// Closes the node and starts the next inputs on an empty one, its feeds from their start.
    private func freshStore(_ feeds: inout Feeds) {
        let old = feeds.node, number = feeds.stores + 1, directory = self.directory, network = self.network
        do {
            feeds.node = try SessionFuzzing.wait {
                await old.close()
                try? FileManager.default.removeItem(at: directory.appendingPathComponent("node-\(number - 1)"))
                return try await Self.makeNode(in: directory, number: number, network: network)
            }
        } catch {
            fatalError("fold fuzzing: cannot make a fresh node: \(error)")
        }
        feeds.stores = number
        feeds.heads = keys.map { _ in (1, nil) }
    }

    func run(_ data: [UInt8]) {
        feeds.withLock { run(data, feeds: &$0) }
    }

    private func run(_ data: [UInt8], feeds: inout Feeds) {
        var events: [Event] = []
        var i = 0
        while i + 6 <= data.count {
            let kind = EventKind.known[Int(data[i]) % EventKind.known.count]
            let signer = Int(data[i + 1]) % keys.count
            let objectChoice = Int(data[i + 2])
            // Forward by the step, but never past ten seconds from now (within
            // the drift whatever the run's length), and always forward.
            let ceiling = HLC(physicalMillis: UInt64(Date().timeIntervalSince1970 * 1000) + 10_000, logical: 0).rawValue
            feeds.clock = max(feeds.clock + 1, min(feeds.clock + UInt64(data[i + 3]) << 16, ceiling))
            let length = Int(data[i + 4]) << 8 | Int(data[i + 5])
            let payloadBytes = Array(data[(i + 6)..<min(data.count, i + 6 + length)])
            i += 6 + length
            guard let payload = try? CBORDecoder.decode(payloadBytes) else { continue }
            let object = self.object(objectChoice, earlier: events)
            let (seq, prev) = feeds.heads[signer]
            guard
                let event = try? Event.sign(
                    with: keys[signer], seq: seq, prev: prev, hlc: HLC(rawValue: feeds.clock), kind: kind, object: object, payload: payload)
            else { continue }
            feeds.heads[signer] = (seq + 1, event.id)
            events.append(event)
        }
        guard !events.isEmpty else { return }
        feeds.runs += 1
        defer { if feeds.runs % Self.freshStoreEvery == 0 { freshStore(&feeds) } }
        let node = feeds.node, users = keys.map { UserID($0.publicKey) }, signed = events
        let checkRebuild = feeds.runs % Self.rebuildEvery == 0
        do {
            try SessionFuzzing.wait {
                let report = await node.ingest(events: signed)
                // Built in feed order within the drift: a refusal is a defect of the node, not of the input.
                if let refused = report.errors.first { violated("a well-formed event was refused: \(refused.code): \(refused.reason)") }
                for user in users {
                    _ = try node.profile(of: user)
                    _ = try node.balance(of: user)
                    _ = try node.pictures(of: user)
                    _ = try node.chats(of: user)
                    _ = try node.followers(of: user)
                    _ = try node.slots(of: user)
                }
                _ = try node.feed()
                if checkRebuild {
                    let folded = try node.digest()
                    try await node.rebuildProjections()
                    if try node.digest() != folded { violated("the state folded write by write differs from a rebuild of the same log") }
                }
            }
        } catch {
            violated("a query failed after folding: \(error)")
        }
    }

    /// The object an event names: one of four fixed ids (the first two
    /// bound to the first two signers' keys, Specs/events.md §6.4), a
    /// signer's key, or the id of one of the input's earlier events (a
    /// message to edit).
    func object(_ choice: Int, earlier: [Event]) -> ObjectID {
        switch choice % 8 {
        case 0, 1:
            return CreatedID.make(author: keys[choice % 8].publicKey, nonce: [UInt8](repeating: UInt8(0xA0 + choice % 8), count: 16))
        case 2, 3: return Bytes32([UInt8](repeating: UInt8(0xA0 + choice % 8), count: 32)) ?? .zero
        case 4...6: return keys[choice % 8 - 4].publicKey
        default: return earlier.isEmpty ? .zero : earlier[(choice / 8) % earlier.count].id
        }
    }

    /// One event per vector of Specs/vectors/events.json, signed by the
    /// signer and naming the object its kind expects most often.
    func seeds(vectors: URL) -> [[UInt8]] {
        FuzzTarget.event.seeds(vectors: vectors).compactMap { envelope in
            guard let event = try? Event.decode(envelope), let payload = event.payloadBytes,
                let index = EventKind.known.firstIndex(of: event.kind), payload.count < 1 << 16
            else { return nil }
            return [UInt8(index), 0, 4, 1, UInt8(payload.count >> 8), UInt8(payload.count & 0xff)] + payload
        }
    }
}

/// Where the fuzz targets keep their stores: in memory where the system has
/// a tmpfs (a commit's flush costs nothing there), removed at exit.
enum FuzzStores {
    static func directory(_ name: String) -> URL {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? URL(fileURLWithPath: "/dev/shm") : FileManager.default.temporaryDirectory
        let url = base.appendingPathComponent("chorus-fuzz-\(name)-\(ProcessInfo.processInfo.processIdentifier)")
        try? FileManager.default.removeItem(at: url)
        made.withLock { $0.append(url) }
        if !registered.exchange(true, ordering: .relaxed) {
            atexit { for url in FuzzStores.made.withLock({ $0 }) { try? FileManager.default.removeItem(at: url) } }
        }
        return url
    }

    static let made = Mutex<[URL]>([])
    static let registered = Atomic<Bool>(false)
}
