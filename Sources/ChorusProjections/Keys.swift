import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage

/// The merge order of events: (HLC, author, event id), compared as the
/// 72-byte big-endian concatenation (Specs/projections.md §2).
package struct MergeOrder: Hashable, Comparable, Sendable {
    /// The event's HLC, compared first.
    package let hlc: HLC
    /// The key that signed the event, compared second.
    package let author: PublicKey
    /// The event's id, compared last: it makes the order total.
    package let id: EventID

    /// The merge order of an event known by its HLC, author and id.
    package init(hlc: HLC, author: PublicKey, id: EventID) {
        self.hlc = hlc
        self.author = author
        self.id = id
    }

    /// The merge order of `event`: its HLC, author and id.
    package init(_ event: Event) { self.init(hlc: event.hlc, author: event.author, id: event.id) }

    /// The 72-byte form `u64be(hlc) || author || id`: key suffix of facts and
    /// ledger entries, whose bytewise order is the merge order.
    package var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(72)
        append(to: &out)
        return out
    }

    /// Appends the 72-byte form to `out` (a key built in place).
    func append(to out: inout [UInt8]) {
        appendBigEndian(hlc.rawValue, to: &out)
        author.append(to: &out)
        id.append(to: &out)
    }

    init(bytes b: ArraySlice<UInt8>) throws {
        guard b.count == 72, let author = Bytes32(b.dropFirst(8).prefix(32)), let id = Bytes32(b.suffix(32)) else {
            throw ProjectionError.corrupt("merge order of \(b.count) bytes")
        }
        self.hlc = HLC(rawValue: b.prefix(8).reduce(0) { $0 << 8 | UInt64($1) })
        self.author = author
        self.id = id
    }

    /// By HLC, then author, then id, bytewise: the same order as `bytes`.
    package static func < (a: MergeOrder, b: MergeOrder) -> Bool {
        if a.hlc != b.hlc { return a.hlc < b.hlc }
        if a.author != b.author { return a.author < b.author }
        return a.id < b.id
    }
}

/// Errors from reading the projected state.
package enum ProjectionError: Error, Sendable, CustomStringConvertible {
    /// A stored entry does not decode as expected; rebuilding the projections
    /// from the log repairs it.
    case corrupt(String)

    /// The message shown to people, with the advice to rebuild.
    package var description: String {
        switch self {
        case .corrupt(let what): "projection state damaged: \(what); rebuild the projections from the log"
        }
    }
}

extension ProjectionError {
    /// A stable, machine-readable name of the error, in snake case.
    package var code: String {
        switch self {
        case .corrupt: "projections_corrupt"
        }
    }
}

/// The projected object an event feeds. Each class's state is a pure
/// function of the facts filed under it (Specs/projections.md §3).
enum ObjectClass: UInt8, CaseIterable {
    case device = 1, profile, picture, follow, like, block, chat, reads, message, slots, coins, deviceKey, chatKeys

    /// The fold registry's order: a class is folded after every class its
    /// rules read (Specs/projections.md §9.3). The switch has no default, so
    /// a new class does not compile until it has a place here, and
    /// `FoldRun.foldInBulk` must name it too.
    var foldRank: Int {
        switch self {
        case .device: 0  // every rule reads device bindings
        case .profile: 1
        case .picture: 2
        case .follow: 3
        case .like: 4
        case .block: 5
        case .slots: 6  // slots name pictures
        case .deviceKey: 7
        case .chat: 8  // memberships, read by what follows
        case .reads: 9
        case .chatKeys: 10  // reads memberships and device bindings
        case .message: 11  // reads memberships and epochs
        case .coins: 12  // reads only device bindings; a rebuild folds it beside the others (§9.2)
        }
    }

    static let foldOrder: [ObjectClass] = allCases.sorted { $0.foldRank < $1.foldRank }

    static func targets(of event: Event) -> [(ObjectClass, Bytes32)] {
        switch event.kind {
        case .deviceAdded, .deviceRemoved: [(.device, event.object)]
        case .deviceKey: [(.deviceKey, event.object)]
        case .chatKey: [(.chatKeys, event.object)]
        // Stored and relayed, not folded (Specs/events.md §6.3).
        case .unknown: []
        // A user's relay list is a register of the user's profile object (projections.md §6.12).
        case .profileSet, .relaysSet: [(.profile, event.object)]
        case .pictureCreated, .pictureCaptioned, .pictureMoved, .pictureDeleted: [(.picture, event.object)]
        case .followAdded, .followRemoved: [(.follow, event.object)]
        case .likeAdded, .likeRemoved: [(.like, event.object)]
        case .blockAdded, .blockRemoved: [(.block, event.object)]
        case .chatCreated, .chatMemberAdded, .chatMemberRemoved: [(.chat, event.object)]
        case .chatRead: [(.reads, event.object)]
        case .messageSent: [(.message, event.id)]
        case .messageEdited, .messageDeleted: [(.message, event.object)]
        case .coinCredited, .coinSpent, .coinGiven, .coinRightsMoved, .slotUnlocked: [(.coins, .zero)]
        case .slotSet: [(.slots, event.object)]
        }
    }
}

/// Key prefixes of the `state` database: every projected table lives in it,
/// so the projection digest is one hash over one database
/// (Specs/projections.md §5 lists every table and its encoding).
enum Table: UInt8, CaseIterable {
    case device = 0x10  // device -> binding
    case userDevice = 0x11  // user || device -> ()
    case encryptionKey = 0x12  // device -> [X25519 key, hlc, event id]
    case profile = 0x20  // user || field name -> register
    case relays = 0x21  // user -> relay list register
    case picture = 0x30  // picture -> picture record
    case gallery = 0x31  // owner || position (64, zero padded) || picture -> ()
    case picturesByTime = 0x33  // owner || created hlc || picture -> ()
    case blobRef = 0x35  // blob hash || picture -> ()
    case edge = 0xFC  // class || target || actor user -> live add ids; stored as their u64 arrivals; 0x40 in §5 (`storedLast`)
    case edgeOut = 0xFD  // class || actor user || target -> (); 0x41 in §5 (`storedLast`)
    case chat = 0x50  // chat -> chat record
    case member = 0x51  // chat || user -> membership intervals
    case userChat = 0x52  // user || chat -> () (current members)
    case message = 0xFE  // chat || hlc || message -> message entry; 0x53 in §5 (`storedLast`)
    case read = 0x54  // chat || user -> read marker
    case messageCount = 0x55  // chat -> u64 number of effective messages
    case epoch = 0x56  // chat || epoch id -> [start hlc, introducing event id]
    case wrap = 0x57  // chat || epoch id || device -> first effective key event wrapping it
    case rights = 0x60  // device -> u64 spending rights
    case receipt = 0x61  // receipt text -> crediting event id
    case slotUnlock = 0x62  // user || slot -> unlocking event id
    case ledger = 0x63  // merge order -> coin decision
    case slot = 0x70  // user || slot -> slot register
    case noEffect = 0x7F  // event id -> [code, detail]; stored under u64 arrival (§9.1)

    func key<each Part: KeyPart>(_ parts: repeat each Part) -> [UInt8] { keyBytes(rawValue, repeat each parts) }

    /// Tables stored under another byte than the one Specs/projections.md
    /// §5 and the digest (§8) give them, (stored, §5), in the order of
    /// both: after every other table and in the order a rebuild folds
    /// them, so it writes each, in key order, as LMDB appends (pages filled,
    /// never split; §9.1, §9.2).
    static let storedLast: [(stored: UInt8, inState: UInt8)] = [
        (Table.edge.rawValue, 0x40), (Table.edgeOut.rawValue, 0x41), (Table.message.rawValue, 0x53),
    ]

    /// The tables stored last whose entries a rebuild's folds do not make
    /// in key order (an `edgeOut` key starts with the actor, the fold goes
    /// by target): the rebuild holds them, sorted, until the classes that
    /// write them are folded, and then appends them (§9.2). As [first
    /// byte, first byte past it).
    static let appendedAfterTheirClasses: Range<UInt8> = Table.edgeOut.rawValue..<(Table.edgeOut.rawValue + 1)

    /// The stored key ranges of `state` in the order of §5's keys, each
    /// as [first byte, first byte past it): the tables stored last come
    /// where §5 puts them.
    static let stateOrder: [(from: UInt16, to: UInt16)] = {
        var ranges: [(from: UInt16, to: UInt16)] = []
        var start: UInt16 = 0
        for (stored, inState) in storedLast {
            ranges += [(start, UInt16(inState)), (UInt16(stored), UInt16(stored) + 1)]
            start = UInt16(inState) + 1
        }
        return (ranges + [(start, UInt16(storedLast.first?.stored ?? 0xFF))]).filter { $0.from < $0.to }
    }()

    /// The table of a key of §5 (`inState`) or of a stored one.
    init?(keyByte byte: UInt8) {
        if let moved = Self.storedLast.first(where: { $0.inState == byte }) {
            self.init(rawValue: moved.stored)
        } else {
            self.init(rawValue: byte)
        }
    }

    /// `key` (stored) as §5 gives it.
    static func stateKey(_ key: [UInt8]) -> [UInt8] {
        guard let first = key.first, first >= storedLast[0].stored, let moved = storedLast.first(where: { $0.stored == first }) else {
            return key
        }
        var inState = key
        inState[0] = moved.inState
        return inState
    }
}

/// A piece of a `state` or `index` key, appended in place: a key is built
/// in one array of its final size, without an array per piece (keys are
/// built for every event a fold or a rebuild reads or writes).
protocol KeyPart {
    var keyByteCount: Int { get }
    func appendKey(to out: inout [UInt8])
}

extension UInt8: KeyPart {
    var keyByteCount: Int { 1 }
    func appendKey(to out: inout [UInt8]) { out.append(self) }
}

extension Bytes32: KeyPart {
    var keyByteCount: Int { 32 }
    func appendKey(to out: inout [UInt8]) { append(to: &out) }
}

extension MergeOrder: KeyPart {
    var keyByteCount: Int { 72 }
    func appendKey(to out: inout [UInt8]) { append(to: &out) }
}

extension Array: KeyPart where Element == UInt8 {
    var keyByteCount: Int { count }
    func appendKey(to out: inout [UInt8]) { out.append(contentsOf: self) }
}

extension ArraySlice: KeyPart where Element == UInt8 {
    var keyByteCount: Int { count }
    func appendKey(to out: inout [UInt8]) { out.append(contentsOf: self) }
}

/// `prefix` followed by `parts`, in one array of the key's size.
func keyBytes<each Part: KeyPart>(_ prefix: UInt8, _ parts: repeat each Part) -> [UInt8] {
    var count = 1
    for part in repeat each parts { count += part.keyByteCount }
    var out: [UInt8] = []
    out.reserveCapacity(count)
    out.append(prefix)
    for part in repeat each parts { part.appendKey(to: &out) }
    return out
}

/// A `state` key as a dictionary key: hashed as one block of bytes, where
/// `[UInt8]` feeds the hasher a byte at a time (a bulk fold builds and
/// compares the entries of every object it folds).
struct StateKey: Hashable {
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
}

/// Key prefixes of the `index` database: lookups the folds need, derived
/// from the log but not part of the projected state.
enum IndexTable: UInt8, CaseIterable {
    // 0x01 (author || class || object) is retired: a device's feed lists what it signed.
    case coinParty = 0x02  // key || merge order -> () (every key a coin event names)
    // 0x03 (chat || sending hlc || message id) is retired: every held send has a `message` state entry (§9.1).
    // 0x04 (class || target || add event id -> merge order) is retired: a removal finds the adds it names through the log's id index.
    case relationshipCancel = 0x05  // class || target || add event id || merge order of a removal naming it -> ()
    case memberOf = 0x06  // user || chat -> () (every chat the user was ever a member of)
    case ledgerParty = 0x07  // key || merge order -> () (ledger entries debiting or crediting the key)
    case coinGroup = 0x08  // group hash || merge order -> () (credits of one receipt, unlocks of one slot)
    /// Only while a rebuild runs, past its sends budget (Specs/projections.md §9.2).
    case rebuildSend = 0x09  // chat || u64be(sending hlc) || message id -> u64be(arrival)
    /// Live pictures and messages whose payload this node holds purged
    /// (Specs/projections.md §9.1): what sync asks peers to refill.
    case payloadGap = 0x0A  // u8(object class) || object id -> ()
    /// Blobs that live pictures and messages reference (`blobRef`) and this
    /// node lacks (Specs/projections.md §9.1): what sync fetches.
    case blobWanted = 0x0B  // blob hash -> ()
    /// Each chat's last activity for each current member (`ChatActivity`,
    /// Specs/projections.md §9.1): what a chat list sorts by.
    case chatActivity = 0x0C  // user || chat -> u64be(activity) [|| u64be(last hlc) || message id || sending device] || u8(unread) [|| u64be(marker hlc) || marker id]
    /// Each chat's row as a chat list shows it (`ChatRow`, Specs/projections.md
    /// §9.1): its record, members, count and last message, in one entry.
    case chatRow = 0x0D  // chat -> row
    /// What a picture's record leaves out and its one-at-a-time fold reads
    /// (`PictureOrders`, Specs/projections.md §9.1).
    case pictureOrders = 0x0E  // picture -> u8(flags) [|| caption order] [|| position order] [|| deletion author]
    /// Credits that take effect or were refused for the supply's limit
    /// (Specs/projections.md §6.9.1): what a walk that must know the supply
    /// at a point in the ledger reads after it.
    case supplyCredit = 0x0F  // merge order -> ()
    /// The coins the effective credits add up to (Specs/projections.md
    /// §6.9), absent when none: derived from the ledger, so not state.
    case supply = 0x10  // () -> u64

    func key<each Part: KeyPart>(_ parts: repeat each Part) -> [UInt8] { keyBytes(rawValue, repeat each parts) }
}
