import ChorusBlobs
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusProjections
import ChorusStorage
import ChorusStore
import Foundation

public enum ReplayError: Error, Sendable, CustomStringConvertible {
    case notAStore(String)
    case outputExists(String)
    case badPoint(String)
    case io(String)
    case staleProjections(String, Staleness)

    public var description: String {
        switch self {
        case .notAStore(let path): "\(path) is not a Chorus store (no data.mdb); pass the store directory with --store"
        case .outputExists(let path): "\(path) already exists and is not empty; pick a new directory for the rebuilt store"
        case .badPoint(let text):
            "\"\(text)\" is not a point in time: use an HLC (hlc:NUMBER, or as the tools print it: 2026-11-22T10:15:30.123Z+4), a time (2026-11-22T10:15:30Z or unix milliseconds), or an arrival position (arrival:N)"
        case .io(let what): what
        case .staleProjections(let path, let why):
            "the projections in \(path) \(why), so they cannot be read as they are; open the store once with this version of chorus (it rebuilds them from the log), or audit a rebuilt copy: chorus-replay rebuild --store \(path) --out NEW_DIR"
        }
    }
}

/// A store opened for replay: the log, blobs and projections of one LMDB
/// environment, without keys and, unless `writable`, read-only, so an audit
/// never changes what it audits.
public struct ReplayStore: Sendable {
    public let path: String
    /// The environment as a `Store`: copies commit through it.
    public let store: Store
    public var env: Environment { store.env }
    public var log: LogStore { store.log }
    public var blobs: BlobStore { store.blobs }
    package var projections: Projections { store.projections }

    public static func open(_ path: String, writable: Bool = false) throws -> ReplayStore {
        guard FileManager.default.fileExists(atPath: path + "/data.mdb") else { throw ReplayError.notAStore(path) }
        let env = try Environment(path: path, readOnly: !writable)
        return ReplayStore(path: path, store: try Store(env: env, config: try Store.configuration(ofStoreAt: path, writeDefault: false)))
    }

    /// Throws `staleProjections` unless the projections were built by this
    /// version with this configuration: an audit that read them would read
    /// another layout's records as this one's.
    public func requireCurrentProjections() throws {
        if let why = try projections.staleness() { throw ReplayError.staleProjections(path, why) }
    }

    /// The user whose node this store is, from its key files (public part only).
    public var ownerUser: PublicKey? {
        let keys = path + "/keys/"
        if let data = FileManager.default.contents(atPath: keys + "user.public"),
            let key = Bytes32(hex: String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        {
            return key
        }
        if let data = FileManager.default.contents(atPath: keys + "user.secret"),
            let seed = Hex.decode(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
            let key = SigningKey(seed: seed)
        {
            return key.publicKey
        }
        return nil
    }

    /// Writes a fresh store at `output` holding the events of this one that
    /// pass `include` (all by default), in their arrival order, with the same
    /// blobs, fork evidence and network configuration, and projections folded
    /// from scratch. Signatures are not checked again here (`verify` does).
    ///
    /// The whole log, without `tolerant`, is copied as stored (`copyLog`
    /// with `whole`: the environment page for page, or its log's tables in
    /// key order while a node commits), which is what `verify` checks. A
    /// selection, or with `tolerant`, is copied event by event: each one is
    /// decoded in full and appended to its feed again, and with `tolerant`
    /// events that cannot be read or no longer fit their feed (a damaged
    /// store) are left out and listed in `skipped` instead of ending the copy.
    public func copy(
        to output: String, include: ((StoredEvent) -> Bool)? = nil, tolerant: Bool = false,
        skipped: ((_ what: String, _ why: String) -> Void)? = nil,
        progress: ((_ done: Int, _ total: Int) -> Void)? = nil
    ) throws -> ReplayStore {
        guard include != nil || tolerant else {
            let target = try copyLog(to: output, whole: true) { _, _ in }.copy
            try target.store.rebuild(progress: progress)
            return target
        }
        let include = include ?? { _ in true }
        let target = try startCopy(at: output, tolerant: tolerant, skipped: skipped)
        let total = try log.eventCount()
        var done = 0
        // Each slice is decoded and checked in full on all cores while the
        // one before is appended (`pipelined`).
        try pipelined(from: UInt64(0)) { since in
            try rawSlice(since: since) { record in
                Result { try LogStore.decodeEnvelope(record.bytes, arrival: record.arrival) }
            }
        } consume: { slice in
            var events: [Event] = []
            for (arrival, item) in slice {
                switch item {
                case .success(let event): if include(StoredEvent(event: event, arrival: arrival)) { events.append(event) }
                case .failure(let error):
                    guard tolerant else { throw error }
                    skipped?("arrival \(arrival)", "\(error)")
                }
            }
            try appendToCopy(events, target: target, tolerant: tolerant, skipped: skipped)
            done += slice.count
            progress?(done, total)
        }
        try finishCopy(target)
        return target
    }

    /// What `rebuild(to:)` wrote: the copy and the digests compared.
    public struct Rebuilt: Sendable {
        public let copy: ReplayStore
        /// The copy's projections, folded from the log.
        public let digest: Hash32
        /// This store's, as they were when the log was copied; nil when
        /// they are stale (`liveStale` says why).
        public let liveDigest: Hash32?
        public let liveStale: Staleness?
    }

    /// `copy(to:)` of the whole log, with the digest of the projections
    /// folded in the copy and the digest of this store's in the snapshot
    /// the log was copied from (`liveDigest`).
    public func rebuild(to output: String, progress: ((_ done: Int, _ total: Int) -> Void)? = nil) throws -> Rebuilt {
        let stale = try projections.staleness()
        let (copy, digests) = try copyLog(to: output, whole: true) { snapshot, copy -> (folded: Hash32, live: Hash32?) in
            try copy.store.rebuild(progress: progress)
            let folded = try copy.projections.digest()
            guard stale == nil else { return (folded, nil) }
            return (folded, try liveDigest(in: snapshot, storedSame: try storesSameState(in: snapshot, as: copy), folded: folded))
        }
        return Rebuilt(copy: copy, digest: digests.folded, liveDigest: digests.live, liveStale: stale)
    }

    /// Whether this store's projections in `snapshot`, which `copy`'s log
    /// was copied from, are stored byte for byte as `copy`'s. The copy
    /// holds the log at the same arrival positions, so that is equal state
    /// (`Projections.storesSameState`).
    func storesSameState(in snapshot: Transaction, as copy: ReplayStore) throws -> Bool {
        try copy.env.read { try projections.storesSameState(in: snapshot, as: copy.projections, in: $0) }
    }

    /// The digest of this store's projections in `snapshot`, which a copy's
    /// log was copied from, once the copy's projections are folded with the
    /// digest `folded`: the fold's when the state is stored the same
    /// (`storedSame`, `storesSameState(in:as:)`); only when it differs is
    /// the live digest computed on its own, expanding every message from
    /// the log again.
    func liveDigest(in snapshot: Transaction, storedSame: Bool, folded: Hash32?) throws -> Hash32 {
        if let folded, storedSame { return folded }
        return try projections.digest(in: snapshot)
    }

    /// A store at `output` with this one's configuration, and its log, fork
    /// evidence and blobs copied table by table in key order, each written
    /// once in order (`Environment.copyDatabases`) instead of event by event
    /// under random ids, its projections empty (rebuild them); and what
    /// `inSnapshot` returns: it reads this store as copied (in the copy's
    /// read transaction, once the copy is written), and is given the copy.
    ///
    /// With `whole`, the whole environment is copied page for page
    /// (`Environment.copyWhole`), its projections as they are stored too,
    /// for a caller that rebuilds them at once (`verify`, `rebuild(to:)`),
    /// and its other databases dropped; table by table as without it when
    /// a writer commits while the copy is made. Page for page is the
    /// faster: the kernel writes the pages, no B-tree is built, and the
    /// rebuild reuses the old projections' pages instead of growing a new
    /// file (which makes the copy about as large as this store's pages in
    /// use, free ones included). `copyWhole` is `Environment.copyWhole`
    /// (tests put a commit before it).
    func copyLog<T>(
        to output: String, whole: Bool = false,
        copyWhole: (Environment, String, Transaction) throws -> Bool = { env, output, snapshot in
            try env.copyWhole(to: output, asOf: snapshot)
        },
        inSnapshot: (Transaction, ReplayStore) throws -> T
    ) throws -> (copy: ReplayStore, inSnapshot: T) {
        if whole {
            try prepareDirectory(output)
            let copied: (ReplayStore, T)? = try env.read { snapshot in
                guard try copyWhole(env, output, snapshot) else { return nil }
                let target = try ReplayStore.open(output, writableNew: true, mapSize: env.mapSize)
                // What a node keeps beside its log and projections (its
                // peers) is not the copy's: the table-by-table copy leaves
                // it out too.
                try target.env.dropDatabases(keeping: Self.copiedDatabases)
                return (target, try inSnapshot(snapshot, target))
            }
            if let copied { return copied }
        }
        let target = whole
            ? try ReplayStore.open(output, writableNew: true, mapSize: env.mapSize) : try prepareCopy(at: output, mapSize: env.mapSize)
        let result = try env.read { snapshot in
            try target.env.copyDatabases(LogStore.databaseNames + BlobStore.databaseNames, from: snapshot)
            return try inSnapshot(snapshot, target)
        }
        return (target, result)
    }

    /// The databases a copy of the whole environment keeps: the log's, the
    /// blobs' and the projections' (which a rebuild clears).
    static let copiedDatabases = Set(LogStore.databaseNames + BlobStore.databaseNames + Projections.databaseNames)

    /// The envelopes after arrival `since` (10,000 at most), each read by
    /// `read` on all cores, with the arrival the next slice starts after.
    func rawSlice<T: Sendable>(
        since: UInt64, _ read: @escaping @Sendable ((arrival: UInt64, bytes: [UInt8])) -> T
    ) throws -> (output: [(arrival: UInt64, item: T)], next: UInt64?)? {
        let limit = 10_000
        let raw = try log.rawEnvelopes(since: since, limit: limit)
        guard let last = raw.last else { return nil }
        let items = parallelMap(raw, chunk: 64, read)
        return (zip(raw.map(\.arrival), items).map { ($0, $1) }, raw.count < limit ? nil : last.arrival)
    }

    /// An empty store at `output` with this one's configuration and blobs,
    /// for `appendToCopy` and `finishCopy`. With `tolerant`, a blob that
    /// cannot be read whole is left out and listed in `skipped`.
    func startCopy(
        at output: String, tolerant: Bool, skipped: ((_ what: String, _ why: String) -> Void)?
    ) throws -> ReplayStore {
        let target = try prepareCopy(at: output, mapSize: 64 << 20)
        for (hash, _) in try blobs.all() {
            let bytes: [UInt8]?
            do { bytes = try blobs.read(hash) } catch {
                guard tolerant else { throw error }
                skipped?("blob \(hash.hex)", "\(error)")
                continue
            }
            guard let bytes else { continue }
            try target.env.write { txn in _ = try target.blobs.put(bytes, in: txn) }
        }
        return target
    }

    /// An empty store at `output` (which must not exist, or be empty) with
    /// this one's network configuration.
    func prepareCopy(at output: String, mapSize: Int) throws -> ReplayStore {
        try prepareDirectory(output)
        return try ReplayStore.open(output, writableNew: true, mapSize: mapSize)
    }

    /// The directory `output` (which must not exist, or be empty), holding
    /// this one's network configuration.
    func prepareDirectory(_ output: String) throws {
        let fm = FileManager.default
        if fm.fileExists(atPath: output), let items = try? fm.contentsOfDirectory(atPath: output), !items.isEmpty {
            throw ReplayError.outputExists(output)
        }
        do {
            try fm.createDirectory(atPath: output, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw ReplayError.io("cannot create \(output): \(error.localizedDescription)")
        }
        try projections.config.write(to: output + "/" + NetworkConfig.fileName)
    }

    /// Appends `events` to a copy in one commit. Clock checks are off: a
    /// copy keeps what the original accepted. Its projections are folded in
    /// bulk by `finishCopy`.
    func appendToCopy(
        _ events: [Event], target: ReplayStore, tolerant: Bool, skipped: ((_ what: String, _ why: String) -> Void)?
    ) throws {
        try target.store.commit(nowMillis: UInt64.max / 2, driftMillis: 0, fold: false) { commit in
            for e in events {
                if case .refused(let why) = try commit.append(e) {
                    guard tolerant else { throw ReplayError.io("event \(e.id.hex) does not fit its feed in the copy: \(why)") }
                    skipped?("event \(e.id.hex)", "does not fit its feed: \(why)")
                }
            }
        }
    }

    /// Copies the fork evidence and folds the copy's projections.
    func finishCopy(_ target: ReplayStore, progress: ((_ done: Int, _ total: Int) -> Void)? = nil) throws {
        // Fork evidence: appending the losing event again records it.
        let forks = try log.forkEvidence()
        if !forks.isEmpty {
            try target.store.commit(nowMillis: UInt64.max / 2, driftMillis: 0, fold: false) { commit in
                for f in forks { _ = try commit.append(f.refused) }
            }
        }
        try target.store.rebuild(progress: progress)
    }

    static func open(_ path: String, writableNew: Bool, mapSize: Int) throws -> ReplayStore {
        let env = try Environment(path: path, initialMapSize: mapSize)
        let config = try NetworkConfig.load(from: path + "/" + NetworkConfig.fileName)
        return ReplayStore(path: path, store: try Store(env: env, config: config))
    }
}

/// A scratch directory removed when the value is released: in memory
/// (`/dev/shm`) when it has `room` bytes free, else in the temporary
/// directory (`$TMPDIR`, else `/tmp`).
public final class ScratchDirectory: Sendable {
    public let path: String

    public init(prefix: String = "chorus-replay", room: Int = 0) throws {
        let base = Self.freeBytes("/dev/shm").map { $0 >= room } == true ? "/dev/shm/" : NSTemporaryDirectory()
        path = base + prefix + "-" + UUID().uuidString
        // The owner's alone, like a store's directory: in `/dev/shm` others
        // could otherwise list what an audit copies there.
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw ReplayError.io("cannot create a scratch directory: \(error.localizedDescription)")
        }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Bytes an unprivileged process may still write under `path`, or nil
    /// when it does not exist.
    static func freeBytes(_ path: String) -> Int? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        return Int(st.f_bavail) * Int(st.f_frsize)
    }
}

extension ReplayStore {
    /// A replay view of a store some node already has open (its reads are
    /// LMDB read transactions: they never block, nor see half a commit).
    package init(path: String, open store: Store) {
        self.init(path: path, store: store)
    }
}
