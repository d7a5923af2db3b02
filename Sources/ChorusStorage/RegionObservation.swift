import Dispatch
import Synchronization

/// A range of keys of one database, `[lower, upper)` (`upper` nil: to the
/// end of the database): what a read depended on. Every key in it starts
/// with `shared`, by which regions are indexed (Specs/storage.md §8).
public struct KeyRegion: Hashable, Sendable {
    /// The LMDB database handle the keys belong to.
    public let database: UInt32
    /// The first key of the range.
    public let lower: [UInt8]
    /// The first key past the range; nil: the range runs to the end.
    public let upper: [UInt8]?
    /// A prefix every key in the range has (at most `indexedPrefix` bytes).
    public let shared: [UInt8]

    /// The longest `shared` prefix indexed: a longer one is cut, which only
    /// makes the index less selective.
    static let indexedPrefix = 40

    init(database: UInt32, lower: [UInt8], upper: [UInt8]?, shared: [UInt8]) {
        self.database = database
        self.lower = lower
        self.upper = upper
        self.shared = shared.count > Self.indexedPrefix ? Array(shared.prefix(Self.indexedPrefix)) : shared
    }

    /// Exactly `key`.
    static func point(_ db: UInt32, _ key: [UInt8]) -> KeyRegion {
        KeyRegion(database: db, lower: key, upper: key + [0], shared: key)
    }

    /// Every key starting with `prefix`, or those of them below `upper`.
    static func prefix(_ db: UInt32, _ prefix: [UInt8], upper: [UInt8]? = nil) -> KeyRegion {
        KeyRegion(database: db, lower: prefix, upper: upper ?? successor(of: prefix), shared: prefix)
    }

    /// From `lower` up to and including `last` (a scan that stopped there),
    /// or to the end of the database (nil).
    static func scan(_ db: UInt32, from lower: [UInt8], through last: UnsafeRawBufferPointer?) -> KeyRegion {
        guard let last else { return KeyRegion(database: db, lower: lower, upper: nil, shared: []) }
        let shared = zip(lower, last).prefix { $0 == $1 }.map(\.0)
        return KeyRegion(database: db, lower: lower, upper: Array(last) + [0], shared: shared)
    }

    /// The whole database.
    static func all(_ db: UInt32) -> KeyRegion { KeyRegion(database: db, lower: [], upper: nil, shared: []) }

    /// The smallest key above every key starting with `prefix`; nil when
    /// there is none (the prefix is empty or all 0xFF).
    static func successor(of prefix: [UInt8]) -> [UInt8]? {
        var upper = prefix
        while let last = upper.last, last == 0xFF { upper.removeLast() }
        guard !upper.isEmpty else { return nil }
        upper[upper.count - 1] += 1
        return upper
    }

    // Recorded regions go into a set on every read an observation makes:
    // bytes hashed in blocks, not one `UInt8` at a time as `[UInt8]`'s own
    // hashing does. Equality still compares every field.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(database)
        PrefixKey.combine(lower[...], into: &hasher)
        if let upper { PrefixKey.combine(upper[...], into: &hasher) }
    }

    /// Whether `key` of `db` falls inside.
    func contains(_ db: UInt32, _ key: some Collection<UInt8>) -> Bool {
        guard db == database, !key.lexicographicallyPrecedes(lower) else { return false }
        guard let upper else { return true }
        return key.lexicographicallyPrecedes(upper)
    }
}

/// Bytes as a dictionary key, hashed in blocks: the observers' index is
/// looked up under a prefix of every changed key at every indexed length,
/// and `ArraySlice<UInt8>` hashes a byte at a time.
struct PrefixKey: Hashable {
    let bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    static func combine(_ bytes: ArraySlice<UInt8>, into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    func hash(into hasher: inout Hasher) { Self.combine(bytes, into: &hasher) }
}

/// The regions the reads of one observation touched, and the oldest
/// snapshot they saw (`RegionObservers`). Reads on any thread record here.
public final class ReadRecorder: Sendable {
    private let state = Mutex<(regions: Set<KeyRegion>, snapshot: UInt64?)>(([], nil))

    public init() {}

    func record(_ region: KeyRegion) { _ = state.withLock { $0.regions.insert(region) } }

    func saw(snapshot id: UInt64) {
        state.withLock { s in s.snapshot = min(s.snapshot ?? id, id) }
    }

    /// What was recorded: the regions, and the transaction id of the oldest
    /// snapshot read (nil when nothing was read from the store).
    public var recorded: (regions: Set<KeyRegion>, snapshot: UInt64?) { state.withLock { $0 } }
}

/// The recorder that the reads of the current task record into
/// (`Environment.read` picks it up when it begins a transaction).
public enum ReadTracking {
    @TaskLocal public static var recorder: ReadRecorder?
}

/// The keys one write transaction wrote or deleted, for the observers whose
/// reads they touched. Used only by the writing thread.
final class ChangeList {
    var keys: [(database: UInt32, key: [UInt8])] = []
    var wholeDatabases: Set<UInt32> = []
    /// Too many keys to keep: every observer is treated as touched.
    var overflow = false

    static let maximumKeys = 1 << 20

    func wrote(_ db: UInt32, _ key: [UInt8]) {
        guard !overflow else { return }
        if keys.count >= Self.maximumKeys {
            overflow = true
            keys = []
        } else {
            keys.append((db, key))
        }
    }

    func wrote(_ db: UInt32, _ key: UnsafeRawBufferPointer) {
        if !overflow { wrote(db, Array(key)) }
    }

    func wroteAll(_ db: UInt32) { wholeDatabases.insert(db) }
}

/// The open observations of one environment with the regions their last
/// reads touched. Each commit's change list is matched against them off
/// the writing thread, in commit order, and only the observations whose
/// regions it touched are woken (as GRDB's ValueObservation tracks the
/// regions a request read; Specs/storage.md §8).
public final class RegionObservers: Sendable {
    /// One observation's entry.
    private struct Entry {
        var regions: [KeyRegion] = []
        /// Woken when a commit touches a region; never called under the lock.
        let wake: @Sendable () -> Void
    }

    /// A commit as the index keeps it, to check regions registered after it
    /// was matched but read before it (their snapshot is older).
    private struct Recent {
        let id: UInt64
        /// Changed keys cut to the indexed prefix length... and nil when
        /// the commit changed too much to keep.
        let keys: [(database: UInt32, key: [UInt8])]?
        let wholeDatabases: Set<UInt32>
    }

    private struct State {
        var next = 0
        var entries: [Int: Entry] = [:]
        /// database → shared prefix → observations with a region under it.
        var index: [UInt32: [PrefixKey: Set<Int>]] = [:]
        /// How many indexed regions have each shared-prefix length.
        var lengths: [Int: Int] = [:]
        var recent: [Recent] = []
        var recentKeys = 0
        /// The newest commit dropped from `recent` (or never kept).
        var forgottenThrough: UInt64 = 0
        var finished = false
    }

    private let state = Mutex(State())
    private let count = Atomic<Int>(0)
    private let queue = DispatchQueue(label: "chorus-region-observers")
    /// Changed keys kept for late registrations, across recent commits.
    static let recentKeyBudget = 1 << 16

    init() {}

    /// Whether any observation is open: write transactions list their
    /// changes only then.
    var isActive: Bool { count.load(ordering: .relaxed) > 0 }

    /// Opens an observation; `wake` is called (on any thread) when a commit
    /// touches what it last read, or at once when it has read nothing yet.
    public func open(wake: @escaping @Sendable () -> Void) -> RegionObservation {
        let id = state.withLock { s -> Int? in
            guard !s.finished else { return nil }
            defer { s.next += 1 }
            s.entries[s.next] = Entry(wake: wake)
            return s.next
        }
        if id != nil { count.add(1, ordering: .relaxed) }
        return RegionObservation(observers: self, id: id)
    }

    /// Replaces an observation's regions with those of its latest read,
    /// which saw the store as of commit `snapshot`; wakes it if a commit
    /// after that snapshot touched them already.
    func update(_ id: Int, regions: Set<KeyRegion>, snapshot: UInt64?) {
        let wake = state.withLock { s -> (@Sendable () -> Void)? in
            guard var entry = s.entries[id] else { return nil }
            Self.unindex(id, entry.regions, in: &s)
            entry.regions = Array(regions)
            s.entries[id] = entry
            Self.index(id, entry.regions, in: &s)
            guard let snapshot else { return nil }
            if s.forgottenThrough > snapshot { return entry.wake }
            for commit in s.recent where commit.id > snapshot {
                if Self.touches(commit, entry.regions) { return entry.wake }
            }
            return nil
        }
        wake?()
    }

    func close(_ id: Int) {
        let removed = state.withLock { s -> Bool in
            guard let entry = s.entries.removeValue(forKey: id) else { return false }
            Self.unindex(id, entry.regions, in: &s)
            return true
        }
        if removed { count.subtract(1, ordering: .relaxed) }
    }

    /// Ends every observation (the store is closing): each is woken once
    /// more and finds itself closed.
    public func finishAll() {
        let wakes = state.withLock { s -> [@Sendable () -> Void] in
            s.finished = true
            defer {
                s.entries = [:]
                s.index = [:]
                s.lengths = [:]
            }
            return s.entries.values.map(\.wake)
        }
        count.store(0, ordering: .relaxed)
        for wake in wakes { wake() }
    }

    func isOpen(_ id: Int) -> Bool { state.withLock { $0.entries[id] != nil } }

    /// A write transaction `id` committed with `changes` (nil: it listed
    /// none, as no observation was open when it began). One that wrote
    /// nothing is not a commit: LMDB gives its id to the next.
    func committed(_ id: UInt64, _ changes: ChangeList?) {
        if let changes, changes.keys.isEmpty, changes.wholeDatabases.isEmpty, !changes.overflow { return }
        let keys: [(database: UInt32, key: [UInt8])]?
        let whole: Set<UInt32>
        if let changes, !changes.overflow {
            keys = changes.keys
            whole = changes.wholeDatabases
        } else {
            keys = nil
            whole = []
        }
        guard changes != nil || isActive else {
            state.withLock { s in
                s.forgottenThrough = max(s.forgottenThrough, id)
            }
            return
        }
        queue.async { [self] in match(Recent(id: id, keys: keys, wholeDatabases: whole)) }
    }

    private func match(_ commit: Recent) {
        let wakes = state.withLock { s -> [@Sendable () -> Void] in
            var touched: Set<Int> = []
            if let keys = commit.keys {
                for db in commit.wholeDatabases {
                    for ids in (s.index[db] ?? [:]).values { touched.formUnion(ids) }
                }
                let lengths = s.lengths.keys.sorted()
                for (db, key) in keys {
                    guard let byPrefix = s.index[db] else { continue }
                    for length in lengths where length <= key.count {
                        guard let ids = byPrefix[PrefixKey(key[0..<length])] else { continue }
                        for id in ids where !touched.contains(id) {
                            if s.entries[id]?.regions.contains(where: { $0.contains(db, key) }) == true { touched.insert(id) }
                        }
                    }
                }
            } else {
                touched = Set(s.entries.keys)
            }
            Self.remember(commit, in: &s)
            return touched.compactMap { s.entries[$0]?.wake }
        }
        for wake in wakes { wake() }
    }

    private static func remember(_ commit: Recent, in s: inout State) {
        let size = commit.keys?.count ?? recentKeyBudget + 1
        guard size <= recentKeyBudget else {
            s.recent = []
            s.recentKeys = 0
            s.forgottenThrough = max(s.forgottenThrough, commit.id)
            return
        }
        s.recent.append(commit)
        s.recentKeys += size
        while s.recentKeys > recentKeyBudget || s.recent.count > 256 {
            let old = s.recent.removeFirst()
            s.recentKeys -= old.keys?.count ?? 0
            s.forgottenThrough = max(s.forgottenThrough, old.id)
        }
    }

    private static func touches(_ commit: Recent, _ regions: [KeyRegion]) -> Bool {
        guard let keys = commit.keys else { return !regions.isEmpty }
        if regions.contains(where: { commit.wholeDatabases.contains($0.database) }) { return true }
        return keys.contains { change in regions.contains { $0.contains(change.database, change.key) } }
    }

    private static func index(_ id: Int, _ regions: [KeyRegion], in s: inout State) {
        for region in regions {
            s.index[region.database, default: [:]][PrefixKey(region.shared[...]), default: []].insert(id)
            s.lengths[region.shared.count, default: 0] += 1
        }
    }

    private static func unindex(_ id: Int, _ regions: [KeyRegion], in s: inout State) {
        for region in regions {
            let shared = PrefixKey(region.shared[...])
            s.index[region.database]?[shared]?.remove(id)
            if s.index[region.database]?[shared]?.isEmpty == true {
                s.index[region.database]?[shared] = nil
            }
            s.lengths[region.shared.count, default: 1] -= 1
            if s.lengths[region.shared.count] == 0 { s.lengths[region.shared.count] = nil }
        }
    }
}

/// One open observation (`RegionObservers.open`): `watching` runs a read
/// with its regions recorded (`ReadTracking`) and hands them to `update`.
public struct RegionObservation: Sendable {
    let observers: RegionObservers
    let id: Int?

    /// Whether it is still open (the store has not closed).
    public var isOpen: Bool { id.map(observers.isOpen) ?? false }

    /// The regions and snapshot of the latest read.
    public func update(_ recorded: (regions: Set<KeyRegion>, snapshot: UInt64?)) {
        guard let id else { return }
        observers.update(id, regions: recorded.regions, snapshot: recorded.snapshot)
    }

    /// Runs `read` with its key regions recorded, then matches commits
    /// against those regions from the read's snapshot on.
    public func watching<T>(_ read: () throws -> T) rethrows -> T {
        let recorder = ReadRecorder()
        let value = try ReadTracking.$recorder.withValue(recorder) { try read() }
        update(recorder.recorded)
        return value
    }

    /// `watching(_:)` for a read that suspends.
    public func watching<T: Sendable>(_ read: @Sendable () async throws -> T) async rethrows -> T {
        let recorder = ReadRecorder()
        let value = try await ReadTracking.$recorder.withValue(recorder) { try await read() }
        update(recorder.recorded)
        return value
    }

    /// Stops matching commits against it.
    public func close() {
        guard let id else { return }
        observers.close(id)
    }
}
