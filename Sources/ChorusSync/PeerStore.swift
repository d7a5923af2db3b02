import ChorusCBOR
import ChorusCrypto
import ChorusNode
import ChorusStorage
import ChorusStore
import Foundation
import Synchronization

/// What this node remembers about one peer (Specs/sync.md §4.2).
package struct PeerRecord: Hashable, Sendable {
    /// The peer's device key, under which the record is stored.
    package var key: PublicKey
    /// The peer's user key, from its last hello.
    package var user: PublicKey?
    /// The address the peer was last seen at; an update with an empty address
    /// keeps it.
    package var address: String
    /// When the last complete sync ended (Unix milliseconds; 0: never).
    package var lastSynced: UInt64
    /// The peer's arrival position announced in the last complete sync: the
    /// next sync asks it to announce only feeds that changed after it.
    package var position: UInt64
    /// Identifies the replication scope that position was reached with; a
    /// different scope asks for every feed again.
    package var scopeTag: Hash32
    /// Totals over every session with this peer.
    package var eventsReceived: UInt64
    /// Events this node sent the peer, summed over every recorded session.
    package var eventsSent: UInt64
    /// How many sessions with the peer were recorded.
    package var sessions: UInt64
    /// The peer's blob serial when it last said which blobs it lacked, and
    /// those blobs: not asked again until its serial changes (sync.md §4.4).
    package var blobSerial: UInt64?
    /// The blobs the peer lacked at `blobSerial` (answered `blobMissing` or
    /// left unanswered); empty when nothing is remembered.
    package var lackedBlobs: Set<Hash32>

    /// A record of a peer never synced with: position 0, zero scope tag, no
    /// totals, nothing remembered about its blobs.
    package init(key: PublicKey, address: String) {
        self.key = key
        self.user = nil
        self.address = address
        self.lastSynced = 0
        self.position = 0
        self.scopeTag = .zero
        self.eventsReceived = 0
        self.eventsSent = 0
        self.sessions = 0
        self.blobSerial = nil
        self.lackedBlobs = []
    }

    func encoded() -> [UInt8] {
        CBOREncoder.encode(
            .map([
                CBORMapEntry(.unsigned(0), .text(address)),
                CBORMapEntry(.unsigned(1), .unsigned(lastSynced)),
                CBORMapEntry(.unsigned(2), .unsigned(position)),
                CBORMapEntry(.unsigned(3), .bytes(scopeTag.bytes)),
                CBORMapEntry(.unsigned(4), .unsigned(eventsReceived)),
                CBORMapEntry(.unsigned(5), .unsigned(eventsSent)),
                CBORMapEntry(.unsigned(6), .unsigned(sessions)),
                CBORMapEntry(.unsigned(7), user.map { .bytes($0.bytes) } ?? .null),
                CBORMapEntry(.unsigned(8), blobSerial.map { .unsigned($0) } ?? .null),
                CBORMapEntry(.unsigned(9), .array(lackedBlobs.sorted().map { .bytes($0.bytes) })),
            ]))
    }

    static func decode(key: PublicKey, _ raw: [UInt8]) -> PeerRecord? {
        guard let v = try? CBORDecoder.decode(raw) else { return nil }
        var r = PeerRecord(key: key, address: v[int: 0]?.textValue ?? "")
        r.lastSynced = v[int: 1]?.unsignedValue ?? 0
        r.position = v[int: 2]?.unsignedValue ?? 0
        r.scopeTag = v[int: 3]?.bytesValue.flatMap { Bytes32($0) } ?? .zero
        r.eventsReceived = v[int: 4]?.unsignedValue ?? 0
        r.eventsSent = v[int: 5]?.unsignedValue ?? 0
        r.sessions = v[int: 6]?.unsignedValue ?? 0
        r.user = v[int: 7]?.bytesValue.flatMap { Bytes32($0) }
        r.blobSerial = v[int: 8]?.unsignedValue
        r.lackedBlobs = Set(v[int: 9]?.arrayValue?.compactMap { $0.bytesValue.flatMap { Bytes32($0) } } ?? [])
        return r
    }
}

/// Known peers, kept in the `peers` database of the node's LMDB environment
/// (key: the peer's device key; value: a CBOR map). Losing it costs only a
/// full height exchange on the next sync.
package struct PeerStore: Sendable {
    /// The LMDB environment holding the `peers` database (the node's store).
    package let env: Environment
    let db: Database
    /// The node whose writer commits the updates (Specs/storage.md §5.1):
    /// behind the events a session received, so a position is never durable
    /// before the events it covers. Nil for a store opened without a node.
    private let node: Node?
    /// Updates not yet durable, and the first error since the last `flush`.
    private let queued = QueuedUpdates()

    /// The `peers` database of `store`, to read: `update` and `forget`
    /// throw, since peer records are written through a node's writer
    /// (`init(node:)`). Throws when the store has no such database (a
    /// read-only store that never synced).
    package init(readingFrom store: Store) throws {
        try self.init(store: store, node: nil)
    }

    /// The `peers` database of `node`'s store, updated through its writer.
    package init(node: Node) throws {
        try self.init(store: node.store, node: node)
    }

    private init(store: Store, node: Node?) throws {
        (env, self.node, db) = (store.env, node, try store.bookkeepingDatabase(\.peers, named: "peers"))
    }

    /// The stored record of the peer with device key `key`, or nil when there
    /// is none (or it does not decode).
    package func record(_ key: PublicKey) throws -> PeerRecord? {
        try env.read { txn in try txn.get(db, key.bytes).flatMap { PeerRecord.decode(key: key, $0) } }
    }

    /// Every stored peer record, in key order; records that do not decode are
    /// skipped.
    package func all() throws -> [PeerRecord] {
        try env.read { txn in
            var out: [PeerRecord] = []
            try txn.scan(db) { k, v in
                if let key = Bytes32(k), let r = PeerRecord.decode(key: key, v) { out.append(r) }
                return true
            }
            return out
        }
    }

    /// Reads, changes and writes one record in one write transaction on the
    /// node's writer, queued behind what is queued there and not waited for
    /// (`flush` waits); throws for a store opened to read.
    package func update(_ key: PublicKey, address: String, _ change: @escaping @Sendable (inout PeerRecord) -> Void) throws {
        let db = self.db
        let work: @Sendable (Transaction) throws -> Void = { txn in
            var r = try txn.get(db, key.bytes).flatMap { PeerRecord.decode(key: key, $0) } ?? PeerRecord(key: key, address: address)
            if !address.isEmpty { r.address = address }
            change(&r)
            try txn.put(db, key.bytes, r.encoded())
        }
        guard let node else { throw BookkeepingReadOnly(database: "peers") }
        queued.started()
        node.enqueueWrite(work) { [queued] error in queued.ended(error) }
    }

    /// Deletes the peer's record, durably when it returns: the next sync with
    /// it starts from position 0 and announces every feed.
    package func forget(_ key: PublicKey) async throws {
        let db = self.db
        let work: @Sendable (Transaction) throws -> Void = { txn in _ = try txn.delete(db, key.bytes) }
        guard let node else { throw BookkeepingReadOnly(database: "peers") }
        try await node.write(work)
    }

    /// Waits until every update queued so far is durable (or failed), and
    /// returns the first error among them since the last flush, if any.
    @discardableResult
    package func flush() async -> (any Error)? {
        // The writer commits in the order it was given work: once an empty
        // write queued now is done, so is every update queued before it
        // (none queued: nothing to wait for, no commit).
        if let node, queued.pending { _ = try? await node.write { _ in } }
        return queued.takeError()
    }
}

/// Updates queued on the writer and not yet durable (or failed), and the
/// first error among them since it was last taken.
private final class QueuedUpdates: Sendable {
    private let state = Mutex<(pending: Int, error: (any Error)?)>((0, nil))
    var pending: Bool { state.withLock { $0.pending > 0 } }
    func started() { state.withLock { $0.pending += 1 } }
    func ended(_ e: (any Error)?) {
        state.withLock {
            $0.pending -= 1
            if $0.error == nil { $0.error = e }
        }
    }
    func takeError() -> (any Error)? {
        state.withLock { s in
            defer { s.error = nil }
            return s.error
        }
    }
}

/// Peers refused for a while after misbehaving (in memory; a restart
/// forgives them).
package final class BanList: Sendable {
    private let bans = Mutex<[PublicKey: (until: ContinuousClock.Instant, reason: String)]>([:])
    /// How long a ban lasts; 10 minutes by default (Specs/sync.md §7).
    package let duration: Duration

    /// An empty ban list whose bans last `duration`.
    package init(duration: Duration = .seconds(600)) { self.duration = duration }

    /// Refuses the peer for `duration` from now, replacing any earlier ban;
    /// `reason` (an error code) is what `refusal(_:)` returns.
    package func ban(_ key: PublicKey, reason: String) {
        bans.withLock { $0[key] = (ContinuousClock.now + duration, reason) }
    }

    /// The reason the peer is refused, or nil when it may connect.
    package func refusal(_ key: PublicKey) -> String? {
        bans.withLock { b in
            guard let entry = b[key] else { return nil }
            if entry.until <= ContinuousClock.now {
                b.removeValue(forKey: key)
                return nil
            }
            return entry.reason
        }
    }
}
