import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusStorage
import ChorusStore
import Foundation

/// Whom an event is addressed to (Specs/sync.md §4.11): the users whose
/// inbox relays it is left at, because without it they would never learn of
/// the feed it lives in.
package enum Addressing {
    /// The addressees of `event`: user keys (or, for a `chat.key` wrap to a
    /// device `userOf` does not bind, that device key), never the author's
    /// own user, without repeats, in key order. `userOf` maps a key to the
    /// user it acts for as the caller folds it. An event whose payload is
    /// purged or does not read as its kind is addressed to nobody.
    package static func addressees(of event: Event, userOf: (PublicKey) throws -> PublicKey) rethrows -> [PublicKey] {
        var out: Set<PublicKey> = []
        switch event.kind.addressing {
        case .objectUser:
            out.insert(event.object)
        case .payloadMembers:
            if let payload = event.payload, let p = try? ChatCreatedPayload(reading: payload) { out.formUnion(p.members) }
        case .payloadUser:
            if let payload = event.payload, let p = try? ChatMemberAddedPayload(reading: payload) { out.insert(p.user) }
        case .wrappedDevices:
            if let payload = event.payload, let p = try? ChatKeyPayload(reading: payload) {
                // Each wrap starts with the recipient device's key (Specs/encryption.md §5).
                var i = 0
                while i + 80 <= p.wraps.count {
                    if let device = Bytes32(Array(p.wraps[i..<i + 32])) { out.insert(try userOf(device)) }
                    i += 80
                }
            }
        case .none:
            break
        }
        out.remove(try userOf(event.author))
        return out.sorted()
    }

    /// Whether `relay` is an `inbox` relay of `user`'s list as `node` folds it.
    package static func isInbox(_ relay: PublicKey, of user: PublicKey, at node: Node) throws -> Bool {
        try node.projections.relays(of: UserID(user))?.relays.contains { $0.key == relay && $0.roles.contains(.inbox) } ?? false
    }
}

/// Runs `work` in one durable write transaction of bookkeeping beside the
/// log, on `node`'s writer (Specs/storage.md §5); a store opened to read
/// (no node) refuses.
func bookkeepingWrite<T: Sendable>(node: Node?, database: String, _ work: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
    guard let node else { throw BookkeepingReadOnly(database: database) }
    return try await node.write(work)
}

/// A write to sync bookkeeping (`peers`, `inbox`, `routing`) through a
/// store opened to read: bookkeeping is written only by the node's one
/// writer (Specs/storage.md §5).
package struct BookkeepingReadOnly: Error, CustomStringConvertible {
    package let database: String
    package var description: String { "the \(database) database was opened to read: its writes go through the node's writer" }
}

/// The `inbox` database of a node's LMDB environment (Specs/sync.md
/// §4.11, Specs/storage.md): events left here for their addressees (at an
/// inbox relay: for the users whose list names it; at a user's node: for
/// its own user, received as notices), which of its own events this node
/// has left at which relay, and the last notice serial each relay sent it.
/// Kept out of the log because a notice is one event of a feed the holder
/// does not host, and feeds are never stored with gaps.
package final class InboxStore: Sendable {
    let env: Environment
    let db: Database
    /// Writes go through this node's writer (Specs/storage.md §5); nil for a
    /// store opened to read.
    private let node: Node?

    // Key prefixes of the one database.
    static let byRecipient: UInt8 = 0  // 0 ‖ recipient ‖ serial (8, big-endian) → [user or null, envelope]
    static let byEvent: UInt8 = 1  // 1 ‖ event id ‖ recipient → serial
    static let leftAt: UInt8 = 2  // 2 ‖ relay ‖ event id ‖ addressee → empty: this node's event left at that relay for that addressee
    static let counter: UInt8 = 3  // 3 → the last serial given
    static let noticeSerial: UInt8 = 4  // 4 ‖ relay → the last notice serial that relay sent this node
    static let ownScanned: UInt8 = 5  // 5 → the height of this device's feed indexed under prefix 6
    static let ownAddressed: UInt8 = 6  // 6 ‖ seq (8, big-endian) → empty: this device's event at seq is addressed

    /// The `inbox` database of `store`, to read (tests, tools); its writes throw.
    package init(readingFrom store: Store) throws {
        (env, node, db) = (store.env, nil, try store.bookkeepingDatabase(\.inbox, named: "inbox"))
    }

    /// The `inbox` database of `node`'s store; writes go through the node's writer.
    package init(node: Node) throws {
        (env, self.node, db) = (node.store.env, node, try node.store.bookkeepingDatabase(\.inbox, named: "inbox"))
    }

    private func write<T: Sendable>(_ work: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        try await bookkeepingWrite(node: node, database: "inbox", work)
    }

    static func be(_ n: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: n >> (56 - 8 * UInt64($0))) } }
    static func readBE(_ b: some Collection<UInt8>) -> UInt64 { b.reduce(0) { $0 << 8 | UInt64($1) } }

    /// An event to keep for its recipients, with the user of its author
    /// when known (a hint kept with it).
    package typealias Item = (event: Event, envelope: [UInt8], user: PublicKey?, recipients: [PublicKey])

    /// Keeps each event for each of its recipients, once per (event,
    /// recipient), in one write transaction; returns how many (event,
    /// recipient) pairs were new.
    @discardableResult
    package func keep(_ items: [Item]) async throws -> Int {
        guard !items.isEmpty else { return 0 }
        let db = self.db
        return try await write { txn in
            var serial = try txn.get(db, [Self.counter]).map { Self.readBE($0) } ?? 0
            var kept = 0
            for item in items {
                for recipient in item.recipients {
                    let seen = [Self.byEvent] + item.event.id.bytes + recipient.bytes
                    if try txn.get(db, seen) != nil { continue }
                    serial += 1
                    let value = CBOREncoder.encode(.array([item.user.map { .bytes($0.bytes) } ?? .null, .bytes(item.envelope)]))
                    try txn.put(db, [Self.byRecipient] + recipient.bytes + Self.be(serial), value)
                    try txn.put(db, seen, Self.be(serial))
                    kept += 1
                }
            }
            try txn.put(db, [Self.counter], Self.be(serial))
            return kept
        }
    }

    /// The notices held for `recipient` after `serial`, oldest first, at
    /// most `limit`, with the serial of the last one returned (`serial`
    /// when none).
    package func notices(for recipient: PublicKey, after serial: UInt64 = 0, limit: Int = .max) throws -> (notices: [Notice], last: UInt64) {
        try env.read { txn in
            var out: [Notice] = []
            var last = serial
            let prefix = [Self.byRecipient] + recipient.bytes
            try txn.scan(db, from: prefix + Self.be(serial &+ 1)) { key, value in
                guard key.starts(with: prefix), out.count < limit else { return false }
                let s = Self.readBE(key.suffix(8))
                if s <= serial { return true }
                if let v = try? CBORDecoder.decode(value), let a = v.arrayValue, a.count == 2, let envelope = a[1].bytesValue {
                    out.append(Notice(user: a[0].bytesValue.flatMap { Bytes32($0) }, envelope: envelope))
                }
                last = s
                return true
            }
            return (out, last)
        }
    }

    /// How many (event, recipient) pairs this store holds.
    package func count() throws -> Int {
        try env.read { txn in
            var n = 0
            try txn.scan(db, prefix: [Self.byEvent]) { _, _ in
                n += 1
                return true
            }
            return n
        }
    }

    /// One of this node's events with one of its addressees: what an inbox
    /// relay keeps, and what this node records as left there.
    package struct Pair: Sendable, Hashable {
        package let event: EventID
        package let addressee: PublicKey
        package init(_ event: EventID, _ addressee: PublicKey) {
            self.event = event
            self.addressee = addressee
        }
    }

    /// Which of `pairs` this node has left at `relay` already. Per
    /// addressee, not per event: the addressees an event has at a relay
    /// grow as their relay lists arrive, and each must be left there.
    package func left(_ pairs: [Pair], at relay: PublicKey) throws -> Set<Pair> {
        try env.read { txn in
            Set(try pairs.filter { try txn.get(db, Self.leftKey(relay, $0)) != nil })
        }
    }

    /// Records that `relay` kept these (event, addressee) pairs as an inbox.
    package func markLeft(_ pairs: [Pair], at relay: PublicKey) async throws {
        guard !pairs.isEmpty else { return }
        let db = self.db
        try await write { txn in
            for pair in pairs { try txn.put(db, Self.leftKey(relay, pair), []) }
        }
    }

    static func leftKey(_ relay: PublicKey, _ pair: Pair) -> [UInt8] {
        [Self.leftAt] + relay.bytes + pair.event.bytes + pair.addressee.bytes
    }

    /// The last notice serial `relay` sent this node (0: none).
    package func noticeSerial(from relay: PublicKey) throws -> UInt64 {
        try env.read { txn in try txn.get(db, [Self.noticeSerial] + relay.bytes).map { Self.readBE($0) } ?? 0 }
    }

    /// Records the last notice serial `relay` sent this node.
    package func setNoticeSerial(_ serial: UInt64, from relay: PublicKey) async throws {
        let db = self.db
        try await write { txn in try txn.put(db, [Self.noticeSerial] + relay.bytes, Self.be(serial)) }
    }

    /// The feeds that left notices for `user` here (Specs/sync.md §6): each
    /// notice's author device and the user it named; `chats` are the users
    /// named by notices of a chat (an invitation or a key wrap), whom a plan
    /// covers first (§9); `followersOnly` those named only by notices of a
    /// follow or an unfollow, whom a plan may defer (§9). A notice `isAnswered` leaves them out: its event
    /// is held and folded, so its sender stays in scope only if something
    /// else (a follow, a chat) puts it there.
    package func correspondents(of user: PublicKey, isAnswered: (EventHeader, PublicKey?) throws -> Bool = { _, _ in false }) throws -> Correspondents {
        var out = Correspondents()
        var follows: Set<PublicKey> = []
        var others: Set<PublicKey> = []
        for notice in try notices(for: user).notices {
            guard let header = try? Event.decode(notice.envelope).header else { continue }
            if try isAnswered(header, notice.user) { continue }
            out.devices.insert(header.author)
            guard let u = notice.user else { continue }
            out.users.insert(u)
            switch header.kind {
            case .chatCreated, .chatMemberAdded, .chatKey:
                out.chats.insert(u)
                others.insert(u)
            case .followAdded, .followRemoved: follows.insert(u)
            default: others.insert(u)
            }
        }
        out.followersOnly = follows.subtracting(others)
        return out
    }

    /// Who left notices for a user (`correspondents(of:)`).
    package struct Correspondents: Sendable {
        /// The users the notices named.
        package var users: Set<PublicKey> = []
        /// The notices' author devices.
        package var devices: Set<PublicKey> = []
        /// The users named by notices of a chat.
        package var chats: Set<PublicKey> = []
        /// The users named only by notices of a follow or an unfollow.
        package var followersOnly: Set<PublicKey> = []
    }

    /// `correspondents(of:)` in `node`'s store, leaving out the notices
    /// whose event `node` holds with its author bound as the notice said
    /// (Specs/sync.md §4.11); none when the store has no inbox database yet
    /// (a read-only store never synced by relay lists).
    package static func correspondents(of user: PublicKey, at node: Node) throws -> Correspondents {
        guard let store = try? InboxStore(node: node) else { return Correspondents() }
        let p = node.projections
        return try store.correspondents(of: user) { header, named in
            guard let held = try node.head(of: header.author)?.seq, held >= header.seq else { return false }
            guard let named else { return true }
            return try p.user(of: header.author) == named
        }
    }

    /// This device's own addressed events (Specs/sync.md §4.11) whose
    /// payload it still holds, oldest first. Which events of the feed are
    /// addressed is indexed as the feed grows, so a plan or a session reads
    /// those events only, not the whole feed.
    package static func addressedOwnEvents(at node: Node, store: InboxStore) throws -> [Event] {
        let device = node.identity.device.raw
        let head = try node.head(of: device)?.seq ?? 0
        var (scanned, seqs) = try store.env.read { txn in
            let scanned = try txn.get(store.db, [ownScanned]).map { readBE($0) } ?? 0
            var seqs: [UInt64] = []
            try txn.scan(store.db, from: [ownAddressed]) { key, _ in
                guard key.first == ownAddressed, key.count == 9 else { return false }
                seqs.append(readBE(key.dropFirst()))
                return true
            }
            return (scanned, seqs)
        }
        if head > scanned {
            let p = node.projections
            var added: [UInt64] = []
            for stored in try node.feed(device, fromSeq: scanned + 1) {
                if !(try Addressing.addressees(of: stored.event, userOf: { try p.user(of: $0) })).isEmpty { added.append(stored.event.header.seq) }
            }
            seqs += added
            scanned = head
            if !store.env.readOnly {
                // An index, not a record: queued on the writer and not
                // waited for (a lost write costs a rescan of those events).
                let db = store.db
                let scannedTo = head
                let indexed = added
                let index: @Sendable (Transaction) throws -> Void = { txn in
                    for seq in indexed { try txn.put(db, [ownAddressed] + be(seq), []) }
                    try txn.put(db, [ownScanned], be(scannedTo))
                }
                node.enqueueWrite(index) { _ in }
            }
        }
        var out: [Event] = []
        for seq in seqs {
            guard let event = try node.feed(device, fromSeq: seq, limit: 1).first?.event, event.header.seq == seq, event.payloadBytes != nil else { continue }
            out.append(event)
        }
        return out
    }

    /// The inbox relays at which this node's own addressed events still
    /// wait to be left (Specs/sync.md §4.11), with how many wait at each,
    /// and whether only follows and unfollows wait there (`followsOnly`: a
    /// plan may leave those for a later sync, §9).
    package static func pending(at node: Node) throws -> [(relay: Relay, events: Int, followsOnly: Bool)] {
        guard let store = try? InboxStore(node: node) else { return [] }
        let p = node.projections
        var waiting: [PublicKey: (relay: Relay, pairs: [Pair], follows: Set<EventID>)] = [:]
        for event in try addressedOwnEvents(at: node, store: store) {
            let follow = event.kind == .followAdded || event.kind == .followRemoved
            for user in try Addressing.addressees(of: event, userOf: { try p.user(of: $0) }) {
                for relay in try p.relays(of: UserID(user))?.relays ?? [] where relay.roles.contains(.inbox) {
                    var entry = waiting[relay.key] ?? (relay, [], [])
                    entry.pairs.append(Pair(event.id, user))
                    if follow { entry.follows.insert(event.id) }
                    waiting[relay.key] = entry
                }
            }
        }
        var out: [(relay: Relay, events: Int, followsOnly: Bool)] = []
        for (key, entry) in waiting {
            let left = try store.left(entry.pairs, at: key)
            let unleft = Set(entry.pairs.filter { !left.contains($0) }.map(\.event))
            if !unleft.isEmpty { out.append((entry.relay, unleft.count, unleft.allSatisfy { entry.follows.contains($0) })) }
        }
        return out.sorted { ($0.events, $1.relay.key) > ($1.events, $0.relay.key) }
    }
}
