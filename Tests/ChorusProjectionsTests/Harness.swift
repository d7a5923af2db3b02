import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage
import ChorusStore
import ChorusTestSupport
import Foundation

@testable import ChorusLog
@testable import ChorusProjections

// A fast, Node-free harness for projection tests: a replica is an LMDB
// environment on a temporary directory (tmpfs when available) with a log, a
// blob store and projections; events are delivered the way ingest does it,
// appended and folded in one write transaction.

/// Test conveniences on the shared seeded generator.
extension SplitMix64 {
    mutating func bytes32() -> Bytes32 { Bytes32(bytes(32))! }
    mutating func chance(_ p: Double) -> Bool { Double(next() >> 11) / Double(UInt64(1) << 53) < p }
    mutating func int(_ r: ClosedRange<Int>) -> Int { Int.random(in: r, using: &self) }
    mutating func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[int(0...items.count - 1)] }
    mutating func key() -> SigningKey { SigningKey(seed: bytes(32))! }
}

/// Mixes a base seed and an index into an independent seed.
func mixSeed(_ base: UInt64, _ index: UInt64) -> UInt64 {
    var g = SplitMix64(seed: base ^ (index &* 0xD1B5_4A32_D192_ED03))
    return g.next()
}

/// A directory for LMDB environments: /dev/shm when it exists (tests then
/// do not wait on disk flushes), else the system temporary directory.
func scratchDirectory(_ label: String) throws -> String {
    let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
    let dir = base + "/chorus-\(label)-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

enum HarnessError: Error, CustomStringConvertible {
    case refused(EventID, EventError)
    var description: String {
        switch self {
        case .refused(let id, let e): "event \(id.short) refused: \(e)"
        }
    }
}

/// One replica: log, blobs and projections in their own environment.
final class Replica {
    let dir: String
    /// The replica's store: its commits and rebuilds.
    let store: Store
    var env: Environment { store.env }
    var log: LogStore { store.log }
    var blobs: BlobStore { store.blobs }
    var projections: Projections { store.projections }
    /// Blob bytes by hash: what sync would fetch for a picture it received.
    let blobSource: [Hash32: [UInt8]]
    /// Events that arrived ahead of their feed, by author and sequence
    /// number, retried when the gap closes (as sync would).
    var waiting: [PublicKey: [UInt64: Event]] = [:]
    /// Transactions committed (deliveries).
    var deliveries = 0
    /// Every event delivered with its payload, by id (to find a purged
    /// picture's blob again).
    var originals: [EventID: Event] = [:]

    static let nowMillis: UInt64 = 1 << 46
    static let recentMinimum = 6
    static let driftMillis: UInt64 = 60_000

    init(
        config: NetworkConfig, blobSource: [Hash32: [UInt8]] = [:], label: String = "replica", supplyLimit: Int64 = Projections.defaultSupplyLimit
    ) throws {
        dir = try scratchDirectory(label)
        let env = try Environment(path: dir, initialMapSize: 16 << 20)
        // The id index's and the facts' levels merge every few events
        // (Specs/storage.md §5.3, projections.md §9.1), so that every
        // property test also folds across merges and across both levels.
        store = try Store(env: env, config: config, recentMinimum: Self.recentMinimum, supplyLimit: supplyLimit)
        self.blobSource = blobSource
    }

    deinit { try? FileManager.default.removeItem(atPath: dir) }


    /// Delivers `batch` in one write transaction: each event is appended
    /// (or buffered when its feed has a gap), buffered successors that
    /// became appendable follow, and every event stored or refilled is
    /// folded. Returns the events folded.
    @discardableResult
    func deliver(_ batch: [Event]) throws -> [Event] {
        let (folded, waitingAfter): ([Event], [PublicKey: [UInt64: Event]]) = try store.commit(
            nowMillis: Self.nowMillis, driftMillis: Self.driftMillis
        ) { commit in
            var waiting = self.waiting
            var queue = batch
            var i = 0
            while i < queue.count {
                let e = queue[i]
                i += 1
                let head = try commit.head(of: e.author)?.seq ?? 0
                if e.seq > head + 1 {
                    waiting[e.author, default: [:]][e.seq] = e
                    continue
                }
                switch try commit.append(e) {
                case .accepted:
                    if let next = waiting[e.author]?.removeValue(forKey: e.seq + 1) { queue.append(next) }
                case .refilled, .duplicate:
                    break
                case .refused(let why):
                    throw HarnessError.refused(e.id, why)
                }
            }
            // Blobs travel with the pictures that reference them (sync
            // fetches the blobs projections reference).
            for e in commit.stored.map(\.event) where e.kind == .pictureCreated {
                if let hash = e.payload?[text: "blob"]?.bytesValue.flatMap({ Bytes32($0) }), let bytes = blobSource[hash] {
                    try commit.putBlob(bytes)
                }
            }
            return (commit.stored.map(\.event), waiting.filter { !$0.value.isEmpty })
        }
        waiting = waitingAfter
        deliveries += 1
        for e in batch where e.payloadBytes != nil { originals[e.id] = e }
        return folded
    }

    var pendingCount: Int { waiting.values.reduce(0) { $0 + $1.count } }

    func digest() throws -> Hash32 { try projections.digest() }

    /// The state as readable lines (table byte, key hex, value hex) for diffs.
    func stateLines() throws -> [String] {
        try env.read { txn in
            try projections.stateEntries(in: txn).map { Hex.encode($0.key) + " = " + Hex.encode($0.value) }
        }
    }

    /// Sends a rebuild filed in `index` past its sends budget and did not
    /// delete (Specs/projections.md §9.2: none may outlast it).
    func filedSendsLeft() throws -> Int {
        try env.read { txn in
            var count = 0
            try txn.scan(projections.index, prefix: [IndexTable.rebuildSend.rawValue]) { _, _ in
                count += 1
                return true
            }
            return count
        }
    }

    /// The keys of `table`'s `index` entries, without the table byte.
    func indexKeys(_ table: IndexTable, in txn: Transaction) throws -> Set<[UInt8]> {
        var out: Set<[UInt8]> = []
        try txn.scan(projections.index, prefix: [table.rawValue]) { key, _ in
            out.insert(Array(key.dropFirst()))
            return true
        }
        return out
    }

    /// Where the keys an index holds differ from those it should, each
    /// named in hex in `stale` (held, not expected) or `missing`, sorted.
    static func differences(indexed: Set<[UInt8]>, expected: Set<[UInt8]>, stale: String, missing: String) -> [String] {
        (indexed.subtracting(expected).map { stale.replacingOccurrences(of: "%@", with: Hex.encode($0)) }
            + expected.subtracting(indexed).map { missing.replacingOccurrences(of: "%@", with: Hex.encode($0)) }).sorted()
    }

    /// Where the `payloadGap` entries (Specs/projections.md §9.1) differ
    /// from the live pictures and messages the state holds with their
    /// payload purged, found here the long way (a walk of every record),
    /// and how many such objects the state holds.
    func payloadGapProblems() throws -> (problems: [String], gaps: Int) {
        try env.read { txn in
            let indexed = try indexKeys(.payloadGap, in: txn)
            var held: Set<[UInt8]> = []
            try txn.scan(projections.state, prefix: [Table.picture.rawValue]) { key, value in
                if try PictureRecord.decode(value).purged { held.insert([ObjectClass.picture.rawValue] + key.dropFirst()) }
                return true
            }
            try txn.scan(projections.state, prefix: [Table.message.rawValue]) { key, value in
                if try value.withUnsafeBytes({ try MessageEntry.isPurged($0) }) { held.insert([ObjectClass.message.rawValue] + key.suffix(32)) }
                return true
            }
            let problems = Self.differences(
                indexed: indexed, expected: held, stale: "payload gap entry %@ names no live object held purged",
                missing: "no payload gap entry for %@, live and held purged")
            return (problems, held.count)
        }
    }

    /// Where the `chatActivity` entries (Specs/projections.md §9.1) differ
    /// from each held chat's activity, found here the long way (its
    /// creation and newest effective message) for each current member: an
    /// entry, key and value, as hex.
    func chatActivityProblems() throws -> [String] {
        try env.read { txn in
            var indexed: Set<[UInt8]> = []
            try txn.scan(projections.index, prefix: [IndexTable.chatActivity.rawValue]) { key, value in
                indexed.insert(Array(key.dropFirst()) + [0x3D] + value)
                return true
            }
            var expected: Set<[UInt8]> = []
            var chats: [Bytes32] = []
            try txn.scan(projections.state, prefix: [Table.chat.rawValue]) { key, _ in
                chats.append(try Codec.b32(key.dropFirst(), "chat id"))
                return true
            }
            for chat in chats {
                guard let activity = try projections.chatActivity(of: chat, in: txn) else { continue }
                var current: [PublicKey] = []
                try txn.scan(projections.state, prefix: Table.member.key(chat)) { key, value in
                    if try Membership.decodeWhole(value).isCurrent { current.append(try Codec.b32(key[33...], "member")) }
                    return true
                }
                for user in current {
                    let unread = try unreadTheLongWay(in: chat, for: user, txn: txn)
                    let marker = try txn.get(projections.state, Table.read.key(chat, user)).map(ReadMarker.decode)
                    expected.insert(user.bytes + chat.bytes + [0x3D] + activity.encoded(unread: unread, marker: marker))
                }
            }
            return Self.differences(
                indexed: indexed, expected: expected, stale: "chat activity entry %@ is not a current member's chat's activity",
                missing: "no chat activity entry %@")
        }
    }

    /// Where the `chatRow` entries (Specs/projections.md §9.1) differ from
    /// what the state says of each held chat, read here the long way: its
    /// view (record, current members, count) and its last message (from
    /// its activity and its entry, with the payloads it names and its
    /// sender's user from the device's binding).
    func chatRowProblems() throws -> [String] {
        try env.read { txn in
            var problems: [String] = []
            var rows: Set<[UInt8]> = try indexKeys(.chatRow, in: txn)
            try txn.scan(projections.state, prefix: [Table.chat.rawValue]) { key, _ in
                let chat = try Codec.b32(key.dropFirst(), "chat id")
                rows.remove(chat.bytes)
                guard let view = try projections.chatView(chat, in: txn) else { return true }
                guard let row = try projections.storedChatRow(of: chat, in: txn) else {
                    problems.append("no chat row for chat \(chat.short)")
                    return true
                }
                if row.chat != view { problems.append("chat \(chat.short): its row's view \(row.chat) is not \(view)") }
                let creation = try projections.log.readArrival(of: view.createdBy, in: txn).map { try projections.log.readTrusted(at: $0, in: txn) }
                if row.creatorDevice != creation?.author {
                    problems.append("chat \(chat.short): its row names \(row.creatorDevice.short) as its creating device, not its creation's author")
                }
                var senders = Senders(state: projections.state)
                let expected = try projections.chatActivity(of: chat, in: txn)?.last.flatMap { last in
                    let key = Table.message.key(chat, Codec.u64(last.hlc.rawValue), last.message)
                    return try txn.get(projections.state, key).flatMap {
                        try projections.messageView(key: key, value: $0, chat: chat, senders: &senders, in: txn)
                    }
                }
                let stored = row.last.map { projections.messageView($0, chat: chat) }
                if stored != expected {
                    problems.append("chat \(chat.short): its row's last message \(String(describing: stored)) is not \(String(describing: expected))")
                }
                return true
            }
            problems += rows.map { "chat row \(Hex.encode($0)) names no held chat" }
            return problems.sorted()
        }
    }

    /// A member's unread count (Specs/projections.md §7.4), found from the
    /// message entries one by one: those after their read marker, not
    /// withdrawn or deleted, sent from a device of another user they do
    /// not block; at most `ChatSummary.unreadLimit`.
    func unreadTheLongWay(in chat: Bytes32, for user: PublicKey, txn: Transaction) throws -> Int {
        let marker = try txn.get(projections.state, Table.read.key(chat, user)).map(ReadMarker.decode)
        let prefix = Table.message.key(chat)
        let after = marker.map { prefix + Codec.u64($0.hlc.rawValue) + $0.message.raw.bytes }
        let blocked = Set(try projections.targets(.block, of: user, in: txn))
        var unread = 0
        try txn.scan(projections.state, prefix: prefix) { key, value in
            if let after, key.lexicographicallyPrecedes(after) || key.elementsEqual(after) { return true }
            let entry = try MessageEntry.decode(value)
            guard !entry.withdrawn, entry.deleted == nil else { return true }
            let sender = try txn.get(projections.state, Table.device.key(entry.device)).map { try DeviceBinding.decode($0).user } ?? entry.device
            if sender != user && !blocked.contains(sender) { unread += 1 }
            return true
        }
        return min(unread, ChatSummary.unreadLimit)
    }

    /// Where the `blobWanted` entries (Specs/projections.md §9.1) differ from
    /// the blobs that `blobRef` entries name and the blob store lacks, found
    /// here the long way, and how many such blobs there are.
    func blobWantedProblems() throws -> (problems: [String], wanted: Int) {
        try env.read { txn in
            let indexed = try indexKeys(.blobWanted, in: txn)
            var lacking: Set<[UInt8]> = []
            try txn.scan(projections.state, prefix: [Table.blobRef.rawValue]) { key, _ in
                let blob = Array(key[1..<33])
                if let hash = Bytes32(blob), try !blobs.contains(hash, in: txn) { lacking.insert(blob) }
                return true
            }
            let problems = Self.differences(
                indexed: indexed, expected: lacking, stale: "blob wanted entry %@ names a blob held or unreferenced",
                missing: "no blob wanted entry for %@, referenced and lacking")
            return (problems, lacking.count)
        }
    }

    /// Every stored event (payload purged or not), in arrival order.
    func storedEvents() throws -> [Event] { try log.arrivals(since: 0).map(\.event) }
}

/// A key that writes a feed: its own sequence, chain and hybrid clock.
final class FeedWriter {
    let key: SigningKey
    var seq: UInt64 = 0
    var prev: EventID? = nil
    var clock = HybridClock()
    var publicKey: PublicKey { key.publicKey }

    init(_ key: SigningKey) { self.key = key }

    /// The id of a picture or chat this feed creates with `nonce` (16 bytes):
    /// bound to its key (Specs/events.md §6.4).
    func createdID(_ nonce: [UInt8]) -> ObjectID { CreatedID.make(author: publicKey, nonce: nonce) }

    /// Signs the next event of this feed, stamped by the feed's clock at
    /// `nowMillis` (after observing `observed`), or at exactly `hlc`.
    func sign(
        _ kind: EventKind, _ object: Bytes32, _ payload: [(String, CBORValue)] = [], nowMillis: UInt64 = 0, hlc: HLC? = nil
    ) throws -> Event {
        let stamp: HLC
        if let hlc {
            precondition(hlc > clock.last, "a feed's clock must increase")
            clock.observe(hlc)
            stamp = hlc
        } else {
            stamp = clock.tick(nowMillis: nowMillis)
        }
        seq += 1
        let e = try Event.sign(with: key, seq: seq, prev: prev, hlc: stamp, kind: kind, object: object, payload: .textMap(payload))
        prev = e.id
        return e
    }
}

/// Payload builders, as `ChorusNode/Mutations.swift` builds them.
enum Payload {
    static func deviceAdded(device: SigningKey, user: PublicKey, name: String? = nil) -> [(String, CBORValue)] {
        var p: [(String, CBORValue)] = [("proof", .bytes(DeviceBinding.proof(device: device, user: user)))]
        if let name { p.append(("name", .text(name))) }
        return p
    }
    static func profile(_ field: ProfileField, _ value: CBORValue) -> [(String, CBORValue)] {
        [("field", .text(field.rawValue)), ("value", value)]
    }
    static func pictureCreated(blob: [UInt8], caption: String? = nil) -> [(String, CBORValue)] {
        var p: [(String, CBORValue)] = [
            ("blob", .bytes(Blake2b.hash256(blob).bytes)), ("size", .unsigned(UInt64(blob.count))), ("mime", .text("image/png")),
        ]
        if let caption { p.append(("caption", .text(caption))) }
        return p
    }
    static func caption(_ text: String) -> [(String, CBORValue)] { [("caption", .text(text))] }
    static func position(_ bytes: [UInt8]) -> [(String, CBORValue)] { [("position", .bytes(bytes))] }
    static func seen(_ ids: [EventID]) -> [(String, CBORValue)] { [("seen", .array(ids.map { .bytes($0.bytes) }))] }
    static func chatCreated(title: String? = nil, members: [PublicKey]) -> [(String, CBORValue)] {
        var p: [(String, CBORValue)] = []
        if let title { p.append(("title", .bytes(fakeSealed(title)))) }
        if !members.isEmpty { p.append(("members", .array(Array(Set(members)).sorted().map { .bytes($0.bytes) }))) }
        return p
    }
    static func member(_ user: PublicKey, admin: Bool = false) -> [(String, CBORValue)] {
        var p: [(String, CBORValue)] = [("user", .bytes(user.bytes))]
        if admin { p.append(("admin", .bool(true))) }
        return p
    }
    /// A message; with `attachment`, carrying an (encrypted) picture whose
    /// blob is those bytes (`blob` and `size`, Specs/events.md §6.2.17).
    static func message(text: String?, picture: ObjectID? = nil, attachment: [UInt8]? = nil) -> [(String, CBORValue)] {
        var p: [(String, CBORValue)] = [("body", .bytes(fakeSealed((text ?? "") + (picture.map { " " + $0.hex } ?? ""))))]
        if let attachment {
            p += [("blob", .bytes(Blake2b.hash256(attachment).bytes)), ("size", .unsigned(UInt64(attachment.count)))]
        }
        return p
    }
    static func edit(chat: ObjectID, text: String) -> [(String, CBORValue)] {
        [("chat", .bytes(chat.bytes)), ("body", .bytes(fakeSealed(text)))]
    }
    static func delete(chat: ObjectID) -> [(String, CBORValue)] { [("chat", .bytes(chat.bytes))] }
    static func read(message: EventID, hlc: HLC) -> [(String, CBORValue)] {
        [("message", .bytes(message.bytes)), ("hlc", .unsigned(hlc.rawValue))]
    }
    static func credit(user: PublicKey, amount: UInt64, receipt: String) -> [(String, CBORValue)] {
        [("user", .bytes(user.bytes)), ("amount", .unsigned(amount)), ("receipt", .text(receipt))]
    }
    static func spend(_ amount: UInt64, for purpose: String = "sticker") -> [(String, CBORValue)] {
        [("amount", .unsigned(amount)), ("for", .text(purpose))]
    }
    static func give(_ amount: UInt64, device: PublicKey? = nil) -> [(String, CBORValue)] {
        var p: [(String, CBORValue)] = [("amount", .unsigned(amount))]
        if let device { p.append(("device", .bytes(device.bytes))) }
        return p
    }
    static func move(_ amount: UInt64) -> [(String, CBORValue)] { [("amount", .unsigned(amount))] }
    static func unlock(slot: Int, price: UInt64) -> [(String, CBORValue)] {
        [("slot", .unsigned(UInt64(slot))), ("price", .unsigned(price))]
    }
    static func slotSet(_ slot: Int, picture: ObjectID?) -> [(String, CBORValue)] {
        [("slot", .unsigned(UInt64(slot))), ("picture", picture.map { .bytes($0.bytes) } ?? .null)]
    }
}

/// The coin invariants (Specs/projections.md §6.9), recomputed independently from the
/// ledger the projections hold. Returns the violations found.
func coinInvariantViolations(_ p: Projections, users: [PublicKey]) throws -> [String] {
    var problems: [String] = []
    let ledger = try p.ledger()
    var rights: [PublicKey: UInt64] = [:]
    var receiptsSeen: Set<String> = []
    var owner: [PublicKey: PublicKey] = [:]
    func ownerOf(_ key: PublicKey) throws -> PublicKey {
        if let o = owner[key] { return o }
        let o = try p.binding(of: key)?.user ?? key
        owner[key] = o
        return o
    }
    var credits: [PublicKey: UInt64] = [:]
    var giftsIn: [PublicKey: UInt64] = [:]
    var giftsOut: [PublicKey: UInt64] = [:]
    var spends: [PublicKey: UInt64] = [:]
    var previous: MergeOrder? = nil
    // The coins credited before each entry, against the supply's limit (§6.9).
    var credited: UInt64 = 0
    let limit = UInt64(p.supplyLimit)
    for (order, entry) in ledger {
        if let previous, !(previous < order) { problems.append("ledger not in merge order at \(order.id.short)") }
        previous = order
        if entry.kind == .coinCredited, entry.isEffective || entry.noEffect?.code == "supply_exhausted" {
            let fits = entry.amount <= limit - credited
            if entry.isEffective, !fits { problems.append("credit \(order.id.short) of \(entry.amount) passes the limit \(limit) after \(credited)") }
            if !entry.isEffective, fits { problems.append("credit \(order.id.short) of \(entry.amount) refused though \(credited) of \(limit) leave room") }
            if entry.isEffective { credited += entry.amount }
        }
        guard entry.isEffective else { continue }
        if let from = entry.from {
            let held = rights[from] ?? 0
            if held < entry.amount {
                problems.append("effective \(entry.kind.name) \(order.id.short) takes \(entry.amount) from \(from.short) holding \(held)")
                rights[from] = 0
            } else {
                rights[from] = held - entry.amount
            }
        }
        if let to = entry.to { rights[to, default: 0] += entry.amount }
        switch entry.kind {
        case .coinCredited:
            guard let receipt = entry.receipt else {
                problems.append("effective credit \(order.id.short) without a receipt")
                continue
            }
            if !receiptsSeen.insert(receipt).inserted { problems.append("receipt \(receipt) counted twice") }
            if entry.from != nil { problems.append("credit \(order.id.short) debits someone") }
            if let to = entry.to { credits[try ownerOf(to), default: 0] += entry.amount }
        case .coinSpent, .slotUnlocked:
            if let from = entry.from { spends[try ownerOf(from), default: 0] += entry.amount }
            if entry.to != nil { problems.append("\(entry.kind.name) \(order.id.short) credits someone") }
        case .coinGiven:
            if let from = entry.from { giftsOut[try ownerOf(from), default: 0] += entry.amount }
            if let to = entry.to { giftsIn[try ownerOf(to), default: 0] += entry.amount }
        case .coinRightsMoved:
            if let from = entry.from, let to = entry.to, try ownerOf(from) != ownerOf(to) {
                problems.append("rights move \(order.id.short) crosses users")
            }
        default:
            problems.append("ledger holds a \(entry.kind.name)")
        }
    }
    let projected = try p.allRights()
    var projectedMap: [PublicKey: UInt64] = [:]
    for (key, r) in projected {
        if r == 0 { problems.append("zero rights stored for \(key.short)") }
        projectedMap[key] = r
    }
    let recomputed = rights.filter { $0.value > 0 }
    if recomputed != projectedMap {
        problems.append("rights differ from the ledger: projected \(projectedMap.map { "\($0.key.short)=\($0.value)" }.sorted()) "
            + "recomputed \(recomputed.map { "\($0.key.short)=\($0.value)" }.sorted())")
    }
    if try p.coinsCredited() != credited { problems.append("the supply says \(try p.coinsCredited()) coins credited, the ledger \(credited)") }
    let stored = Set(try p.receipts().map(\.receipt))
    if stored != receiptsSeen { problems.append("receipt table \(stored.sorted()) differs from effective credits \(receiptsSeen.sorted())") }
    for user in users {
        let balance = try p.balance(of: user).total
        let expected = Int64(credits[user] ?? 0) + Int64(giftsIn[user] ?? 0) - Int64(spends[user] ?? 0) - Int64(giftsOut[user] ?? 0)
        if expected < 0 { problems.append("user \(user.short) flows below zero: \(expected)") }
        if Int64(balance) != expected {
            problems.append(
                "balance of \(user.short) is \(balance), credits \(credits[user] ?? 0) + gifts in \(giftsIn[user] ?? 0) "
                    + "- spends \(spends[user] ?? 0) - gifts out \(giftsOut[user] ?? 0) = \(expected)")
        }
        let fromRights = rights.filter { (try? ownerOf($0.key)) == user }.values.reduce(0, +)
        if balance != fromRights { problems.append("balance of \(user.short) is \(balance), its keys' rights sum to \(fromRights)") }
    }
    return problems
}
