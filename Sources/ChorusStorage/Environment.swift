import CLMDB
import Foundation
import Synchronization

/// A failure of the store's files (LMDB, the disk), thrown by reads and
/// writes alike; `description` says what happened and what to do.
public enum StorageError: Error, Hashable, Sendable, CustomStringConvertible {
    /// LMDB failed the operation with its own code and message: `storage_error`.
    case lmdb(code: Int32, operation: String, message: String)
    /// The disk (or the store's map) is full; nothing of the write was acknowledged: `disk_full`.
    case diskFull(operation: String)
    /// The operating system failed a write or flush (LMDB reports a short
    /// write, which is how a full disk often shows, as EIO): `write_failed`.
    case writeFailed(operation: String)
    /// The store's directory could not be made: `cannot_create_directory`.
    case cannotCreateDirectory(path: String, reason: String)
    /// A write on a store opened read-only: `read_only`.
    case readOnly
    /// A read or write after the node was closed: `closed`.
    case closed
    /// This process already has the store open: LMDB forbids a second
    /// environment on one file in a process (its locks are per process): `already_open_in_process`.
    case alreadyOpenInProcess(path: String)

    public var description: String {
        switch self {
        case .lmdb(let code, let op, let msg): "storage error in \(op): \(msg) (LMDB code \(code))"
        case .diskFull(let op):
            "the disk is full (\(op)); nothing from this write was acknowledged. Free some space and retry"
        case .writeFailed(let op):
            "the store could not be written to disk (\(op): I/O error; the disk may be full or failing); nothing from "
                + "this write was acknowledged and what was acknowledged before is intact. Free some space or check the disk, then retry"
        case .cannotCreateDirectory(let path, let reason): "cannot create store directory \(path): \(reason)"
        case .readOnly: "the store was opened read-only"
        case .closed: "the store is closed (the node was closed); open it again to read or write"
        case .alreadyOpenInProcess(let path):
            "the store at \(path) is already open in this process; use the node that has it open, or close it first"
        }
    }

    static func check(_ rc: Int32, _ operation: String) throws(StorageError) {
        guard rc != 0 else { return }
        if rc == ENOSPC || rc == EDQUOT { throw .diskFull(operation: operation) }
        if rc == EIO { throw .writeFailed(operation: operation) }
        throw .lmdb(code: rc, operation: operation, message: String(cString: mdb_strerror(rc)))
    }
}

/// A handle to a named database inside the environment.
public struct Database: Sendable, Hashable {
    let dbi: MDB_dbi
}

/// One LMDB environment (Specs/storage.md). Opened with `MDB_NOTLS` so read
/// transactions are not tied to threads; writes come from one writer. The
/// map grows instead of failing when it fills.
public final class Environment: @unchecked Sendable {
    // Safety: `env` is used per LMDB's rules: any thread may run read
    // transactions (MDB_NOTLS), write transactions are serialised by LMDB's
    // own lock and never span a suspension point (the API is synchronous),
    // and `resizeLock` keeps transactions out while the map is resized, as
    // `mdb_env_set_mapsize` requires.
    let env: OpaquePointer
    let resizeLock = ReadWriteLock()
    private let durableNanos = Atomic<UInt64>(0)
    /// Set by `close`, under the exclusive `resizeLock`; read under it.
    nonisolated(unsafe) var isClosed = false

    /// Seconds spent in `mdb_txn_commit` (writing and flushing pages) since
    /// the environment was opened: with the writer's busy time, it tells
    /// page writes from the work that prepares them.
    public var secondsInDurableCommits: Double {
        Double(durableNanos.load(ordering: .relaxed)) / 1e9
    }
    public let path: String
    public let readOnly: Bool
    /// The open observations of this store, woken by the commits that
    /// touch what they read (Specs/storage.md §8).
    public let regionObservers = RegionObservers()
    /// The directory's device and inode, registered while open.
    private let identity: FileIdentity?

    /// A directory as the file system knows it, whatever path names it.
    struct FileIdentity: Hashable {
        let device: UInt64
        let inode: UInt64
        init?(_ path: String) {
            var st = stat()
            guard stat(path, &st) == 0 else { return nil }
            device = UInt64(st.st_dev)
            inode = UInt64(st.st_ino)
        }
    }
    /// Stores open in this process.
    private static let openStores = Mutex<Set<FileIdentity>>([])

    public init(path: String, maxDatabases: UInt32 = 32, initialMapSize: Int = 64 << 20, readOnly: Bool = false)
        throws(StorageError)
    {
        self.path = path
        self.readOnly = readOnly
        let identity = FileIdentity(path)
        if let identity {
            let fresh = Self.openStores.withLock { $0.insert(identity).inserted }
            guard fresh else { throw .alreadyOpenInProcess(path: path) }
        }
        self.identity = identity
        var handle: OpaquePointer?
        let created = mdb_env_create(&handle)
        guard created == 0, let handle else {
            Self.release(identity)
            try StorageError.check(created, "mdb_env_create")
            throw .lmdb(code: -1, operation: "mdb_env_create", message: "no environment")
        }
        env = handle
        do {
            try StorageError.check(mdb_env_set_maxdbs(env, maxDatabases), "mdb_env_set_maxdbs")
            try StorageError.check(mdb_env_set_maxreaders(env, 256), "mdb_env_set_maxreaders")
            // LMDB raises this to at least the size of the data already stored.
            try StorageError.check(mdb_env_set_mapsize(env, initialMapSize), "mdb_env_set_mapsize")
            var flags = UInt32(MDB_NOTLS)
            if readOnly { flags |= UInt32(MDB_RDONLY) }
            try StorageError.check(mdb_env_open(env, path, flags, 0o600), "mdb_env_open(\(path))")
        } catch {
            mdb_env_close(env)
            isClosed = true
            Self.release(identity)
            throw error
        }
    }

    deinit {
        if !isClosed {
            mdb_env_close(env)
            Self.release(identity)
        }
    }

    /// Whether this process has the store at `path` open.
    public static func isOpenInProcess(_ path: String) -> Bool {
        guard let identity = FileIdentity(path) else { return false }
        return openStores.withLock { $0.contains(identity) }
    }

    private static func release(_ identity: FileIdentity?) {
        guard let identity else { return }
        _ = openStores.withLock { $0.remove(identity) }
    }

    /// Closes the environment once every transaction in flight has ended;
    /// later transactions fail with `StorageError.closed`. After this the
    /// same store may be opened again in this process (LMDB forbids two
    /// open environments on one file in a process). Idempotent.
    public func close() {
        resizeLock.lockExclusive()
        defer { resizeLock.unlock() }
        guard !isClosed else { return }
        isClosed = true
        mdb_env_close(env)
        Self.release(identity)
        regionObservers.finishAll()
    }

    /// The id of the newest commit, which a read transaction begun now reads.
    var lastCommitID: UInt64 {
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        return UInt64(info.me_last_txnid)
    }

    public var mapSize: Int {
        guard !isClosed else { return 0 }
        var info = MDB_envinfo()
        mdb_env_info(env, &info)
        return info.me_mapsize
    }

    /// Opens (and in a writable environment creates) a named database.
    /// The handle outlives the transaction only once it commits, so the
    /// transaction is committed even when read-only.
    public func openDatabase(_ name: String, create: Bool = true, fixedSizeDuplicates: Bool = false) throws(StorageError) -> Database {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        let txn = try begin(flags: readOnly ? UInt32(MDB_RDONLY) : 0)
        let db: Database
        do {
            db = try Transaction(txn: txn).openDatabase(name, create: create && !readOnly, fixedSizeDuplicates: fixedSizeDuplicates)
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
        try StorageError.check(mdb_txn_commit(txn), "mdb_txn_commit")
        return db
    }

    /// Runs `body` in a read-only transaction: inside `readAsOneSnapshot`
    /// on this thread, that call's transaction; otherwise one of its own.
    public func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        if let pinned = PinnedReads.transaction(of: self) {
            return try body(Transaction(txn: pinned, recorder: Self.recorder(for: pinned)))
        }
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        let txn = try begin(flags: UInt32(MDB_RDONLY))
        defer { mdb_txn_abort(txn) }
        return try body(Transaction(txn: txn, recorder: Self.recorder(for: txn)))
    }

    /// Runs `body` with one read transaction that every `read` of this
    /// environment on this thread joins until `body` returns, so a read made
    /// of several (a chat page with its senders and references, a picture
    /// with its likes) sees one state, whatever commits meanwhile
    /// (Specs/storage.md §6). Nested calls join the outermost. Keep `body`
    /// short and never wait in it for a write of this store: the map cannot
    /// be resized while it runs.
    public func readAsOneSnapshot<T>(_ body: () throws -> T) throws -> T {
        if PinnedReads.transaction(of: self) != nil { return try body() }
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        let txn = try begin(flags: UInt32(MDB_RDONLY))
        defer { mdb_txn_abort(txn) }
        PinnedReads.push(self, txn)
        defer { PinnedReads.pop() }
        return try body()
    }

    /// The current task's read recorder, told which snapshot `txn` reads.
    private static func recorder(for txn: OpaquePointer) -> ReadRecorder? {
        guard let recorder = ReadTracking.recorder else { return nil }
        recorder.saw(snapshot: UInt64(mdb_txn_id(txn)))
        return recorder
    }

    /// Runs `body` with `count` read transactions that all see the same
    /// snapshot (begun again until their transaction ids agree, should a
    /// commit land between them), for a read split across threads: each
    /// transaction used by one thread at a time (`MDB_NOTLS`), and none
    /// after `body` returns.
    public func readSnapshot<T>(count: Int, _ body: ([Transaction]) throws -> T) throws -> T {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        while true {
            // The first may adopt a map another process grew: none other is open yet.
            var txns = [try begin(flags: UInt32(MDB_RDONLY))]
            var rc: Int32 = 0
            while txns.count < max(1, count) {
                var txn: OpaquePointer?
                rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn)
                guard rc == 0, let txn else { break }
                txns.append(txn)
                guard mdb_txn_id(txn) == mdb_txn_id(txns[0]) else { break }
            }
            if txns.count == max(1, count), mdb_txn_id(txns[txns.count - 1]) == mdb_txn_id(txns[0]) {
                defer { for txn in txns { mdb_txn_abort(txn) } }
                let recorder = Self.recorder(for: txns[0])
                return try body(txns.map { Transaction(txn: $0, recorder: recorder) })
            }
            for txn in txns { mdb_txn_abort(txn) }
            if rc != 0, rc != MDB_MAP_RESIZED { try StorageError.check(rc, "mdb_txn_begin") }
        }
    }

    /// Runs `body` in a write transaction and commits it durably. When the
    /// map is full the transaction is aborted, the map doubled and `body` run
    /// again from scratch, so `body` must derive everything from the
    /// transaction (it may run more than once).
    public func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        if readOnly { throw StorageError.readOnly }
        try growIfHalfFull()
        while true {
            do {
                resizeLock.lockShared()
                defer { resizeLock.unlock() }
                let txn = try begin(flags: 0)
                let points = PointCursors(txn: txn)
                let changes = regionObservers.isActive ? ChangeList() : nil
                let id = UInt64(mdb_txn_id(txn))
                let result: T
                do {
                    result = try body(Transaction(txn: txn, points: points, changes: changes))
                } catch {
                    points.closeAll()
                    mdb_txn_abort(txn)
                    throw error
                }
                points.closeAll()
                let started = DispatchTime.now().uptimeNanoseconds
                let rc = mdb_txn_commit(txn)
                durableNanos.add(DispatchTime.now().uptimeNanoseconds - started, ordering: .relaxed)
                try StorageError.check(rc, "mdb_txn_commit")
                // A transaction that wrote nothing leaves no commit (LMDB reuses its id).
                if lastCommitID >= id { regionObservers.committed(id, changes) }
                return result
            } catch StorageError.lmdb(let code, _, _) where code == MDB_MAP_FULL {
                try grow()
            }
        }
    }

    /// Commits a write transaction that rewrites `key` of `db` with the
    /// value it holds, and so changes nothing a reader can see; does
    /// nothing when `key` is absent. LMDB lets a transaction reuse the pages
    /// an earlier one freed only when that one is older than the transaction
    /// just before it and than every open reader's snapshot, so
    /// the pages a large commit frees wait for the next two commits, and the
    /// file keeps about two large commits' worth of free pages. After this
    /// commit, the next one reuses them (Specs/storage.md §5.1). It is
    /// flushed like every commit: the next may overwrite the freed pages
    /// only once no durable meta page names them.
    public func releaseFreedPages(rewriting key: [UInt8], in db: Database) throws {
        try write { txn in
            if let value = try txn.get(db, key) { try txn.put(db, key, value) }
        }
    }

    /// The id of the last committed write transaction, and the pages of the
    /// data file up to the last one in use (free pages among them
    /// included: what the file takes).
    public func transactionAndFilePages() throws -> (lastTransaction: Int, filePages: Int) {
        // The meta pages are read from the map, which a resize replaces.
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        if isClosed { throw StorageError.closed }
        var info = MDB_envinfo()
        try StorageError.check(mdb_env_info(env, &info), "mdb_env_info")
        return (Int(info.me_last_txnid), Int(info.me_last_pgno) + 1)
    }

    private func begin(flags: UInt32) throws(StorageError) -> OpaquePointer {
        if isClosed { throw .closed }
        var txn: OpaquePointer?
        var rc = mdb_txn_begin(env, nil, flags, &txn)
        if rc == MDB_MAP_RESIZED {
            // Another process grew the map; adopt its size and try again.
            resizeLock.unlock()
            resizeLock.lockExclusive()
            mdb_env_set_mapsize(env, 0)
            resizeLock.unlock()
            resizeLock.lockShared()
            if isClosed { throw .closed }
            rc = mdb_txn_begin(env, nil, flags, &txn)
        }
        try StorageError.check(rc, "mdb_txn_begin")
        guard let txn else { throw .lmdb(code: -1, operation: "mdb_txn_begin", message: "no transaction") }
        return txn
    }

    private func grow(ifUsedOver threshold: Int? = nil) throws(StorageError) {
        resizeLock.lockExclusive()
        defer { resizeLock.unlock() }
        if isClosed { throw .closed }
        let (used, size) = usedAndMapSize()
        if let threshold, used * threshold <= size { return }
        let next = size * 2
        try StorageError.check(mdb_env_set_mapsize(env, next), "mdb_env_set_mapsize(\(next))")
    }

    /// Doubles the map before a write transaction once the file's pages
    /// reach half of it (Specs/storage.md §2). Growing only on
    /// `MDB_MAP_FULL` aborts the transaction and runs it again, and in a
    /// growing store that transaction is a large group commit: at 200,000
    /// events one such run was a fifth of the writer's work.
    private func growIfHalfFull() throws(StorageError) {
        resizeLock.lockShared()
        let closed = isClosed
        let (used, size) = closed ? (0, 0) : usedAndMapSize()
        resizeLock.unlock()
        if closed { throw .closed }
        guard used * 2 > size else { return }
        try grow(ifUsedOver: 2)
    }

    /// Bytes up to the file's last page in use, and the map's size.
    func usedAndMapSize() -> (used: Int, size: Int) {
        var info = MDB_envinfo()
        var stat = MDB_stat()
        guard mdb_env_info(env, &info) == 0, mdb_env_stat(env, &stat) == 0 else { return (0, Int.max / 4) }
        return ((Int(info.me_last_pgno) + 1) * Int(stat.ms_psize), info.me_mapsize)
    }

    /// Bytes of the pages in use in the whole file (the file less its free
    /// pages), and of those LMDB's own bookkeeping (the main database and
    /// the free list). Exact where per-database counts are not: a database
    /// of duplicates keeps large value sets in trees that `pageCount(of:)`
    /// leaves out.
    public func pageUse() throws -> (inUse: Int, bookkeeping: Int) {
        try read { txn in
            var info = MDB_envinfo()
            try StorageError.check(mdb_env_info(env, &info), "mdb_env_info")
            var freeStat = MDB_stat()
            try StorageError.check(mdb_stat(txn.txn, 0, &freeStat), "mdb_stat")
            var mainStat = MDB_stat()
            try StorageError.check(mdb_stat(txn.txn, 1, &mainStat), "mdb_stat")
            // Each free-list value is a list of page numbers, its length first.
            var free = 0
            let cursor = try txn.openCursor(0)  // the free list
            defer { mdb_cursor_close(cursor) }
            var k = MDB_val()
            var v = MDB_val()
            var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
            while rc == 0 {
                if v.mv_size >= MemoryLayout<Int>.size, let data = v.mv_data { free += data.loadUnaligned(as: Int.self) }
                rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
            let pageSize = Int(freeStat.ms_psize)
            let pages = { (s: MDB_stat) in s.ms_branch_pages + s.ms_leaf_pages + s.ms_overflow_pages }
            return ((Int(info.me_last_pgno) + 1 - free) * pageSize, (pages(freeStat) + pages(mainStat)) * pageSize)
        }
    }

    /// Bytes used by a database's pages (for stats and benchmarks).
    public func pageCount(of db: Database) throws -> Int {
        try read { txn in
            var stat = MDB_stat()
            try StorageError.check(mdb_stat(txn.txn, db.dbi, &stat), "mdb_stat")
            return (stat.ms_branch_pages + stat.ms_leaf_pages + stat.ms_overflow_pages) * Int(stat.ms_psize)
        }
    }
}

/// A transaction borrowed for the duration of `Environment.read` or `write`.
public struct Transaction {
    let txn: OpaquePointer
    /// A write transaction's cursors for point reads and writes; nil in a
    /// read transaction.
    let points: PointCursors?
    /// Where a read transaction of an observation records what it read.
    let recorder: ReadRecorder?
    /// Where a write transaction lists what it wrote, while observations
    /// are open.
    let changes: ChangeList?

    init(txn: OpaquePointer, points: PointCursors? = nil, recorder: ReadRecorder? = nil, changes: ChangeList? = nil) {
        self.txn = txn
        self.points = points
        self.recorder = recorder
        self.changes = changes
    }

    /// `fixedSizeDuplicates`: a key holds a sorted set of values of one
    /// size (`MDB_DUPSORT | MDB_DUPFIXED`), packed side by side in its pages.
    func openDatabase(_ name: String, create: Bool, fixedSizeDuplicates: Bool = false) throws(StorageError) -> Database {
        var dbi: MDB_dbi = 0
        let flags = (create ? UInt32(MDB_CREATE) : 0) | (fixedSizeDuplicates ? UInt32(MDB_DUPSORT | MDB_DUPFIXED) : 0)
        try StorageError.check(mdb_dbi_open(txn, name, flags, &dbi), "mdb_dbi_open(\(name))")
        return Database(dbi: dbi)
    }

    /// Adds `value` to the values of `key` in a database of fixed-size
    /// duplicates; `last: true` asserts it is the greatest of them
    /// (`MDB_APPENDDUP`: the page is filled in order and never split in two
    /// halves), which LMDB refuses with `MDB_KEYEXIST` otherwise.
    public func putDuplicate(_ db: Database, _ key: [UInt8], _ value: [UInt8], last: Bool) throws(StorageError) {
        changes?.wrote(db.dbi, key)
        let cursor = try points?.cursor(db.dbi)
        let flags = last ? UInt32(MDB_APPENDDUP) : UInt32(MDB_NODUPDATA)
        let rc = Self.withValues(key, value) { k, v in
            if let cursor { mdb_cursor_put(cursor, &k, &v, flags) } else { mdb_put(txn, db.dbi, &k, &v, flags) }
        }
        try StorageError.check(rc, "mdb_put")
    }

    /// Visits the values of `key` in a database of duplicates, in order,
    /// from the first value >= `from`, until `body` returns false.
    public func scanDuplicates(
        _ db: Database, _ key: [UInt8], from: [UInt8], _ body: (_ value: [UInt8]) throws -> Bool
    ) throws {
        recorder?.record(.point(db.dbi, key))
        let cursor = try openCursor(db.dbi)
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        // LMDB points both values into the map when it finds an entry, so
        // they stay valid after the key's and `from`'s bytes are released.
        var rc = Self.withValues(key, from) { kk, vv in
            let found = mdb_cursor_get(cursor, &kk, &vv, MDB_GET_BOTH_RANGE)
            (k, v) = (kk, vv)
            return found
        }
        while rc == 0 {
            if try !body(Self.copy(v)) { return }
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT_DUP)
        }
        if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
    }

    /// Removes one value of `key` from a database of duplicates; returns
    /// whether it was there.
    @discardableResult
    public func deleteDuplicate(_ db: Database, _ key: [UInt8], _ value: [UInt8]) throws(StorageError) -> Bool {
        changes?.wrote(db.dbi, key)
        let cursor = try points?.cursor(db.dbi)
        let rc = Self.withValues(key, value) { k, v in
            guard let cursor else { return mdb_del(txn, db.dbi, &k, &v) }
            // What `mdb_del` does, on the kept cursor.
            let found = mdb_cursor_get(cursor, &k, &v, MDB_GET_BOTH)
            return found == 0 ? mdb_cursor_del(cursor, 0) : found
        }
        if rc == MDB_NOTFOUND { return false }
        try StorageError.check(rc, "mdb_del")
        return true
    }

    /// The first value of `key` >= `from` in a database of duplicates, or nil.
    public func firstDuplicate(_ db: Database, _ key: [UInt8], from: [UInt8]) throws -> [UInt8]? {
        var found: [UInt8]? = nil
        try scanDuplicates(db, key, from: from) { value in
            found = value
            return false
        }
        return found
    }

    /// Calls `body` with the value stored under `key` (nil when absent)
    /// where LMDB holds it, without copying it: the bytes are valid only
    /// inside `body`, which must not write in this transaction.
    public func withValue<R>(_ db: Database, _ key: [UInt8], _ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        try body(try lookup(db, key).map { UnsafeRawBufferPointer(start: $0.mv_data, count: $0.mv_size) })
    }

    /// Copies the value stored under `key`, or nil.
    public func get(_ db: Database, _ key: [UInt8]) throws(StorageError) -> [UInt8]? {
        try lookup(db, key).map(Self.copy)
    }

    /// The value stored under `key` where LMDB holds it, or nil.
    private func lookup(_ db: Database, _ key: [UInt8]) throws(StorageError) -> MDB_val? {
        recorder?.record(.point(db.dbi, key))
        var k = MDB_val()
        var v = MDB_val()
        let cursor = try points?.cursor(db.dbi)
        let rc: Int32 = key.withUnsafeBytes { kb in
            k.mv_size = kb.count
            k.mv_data = UnsafeMutableRawPointer(mutating: kb.baseAddress)
            if let cursor { return mdb_cursor_get(cursor, &k, &v, MDB_SET) }
            return mdb_get(txn, db.dbi, &k, &v)
        }
        if rc == MDB_NOTFOUND { return nil }
        try StorageError.check(rc, "mdb_get")
        return v
    }

    public func put(_ db: Database, _ key: [UInt8], _ value: [UInt8], append: Bool = false) throws(StorageError) {
        changes?.wrote(db.dbi, key)
        let cursor = try points?.cursor(db.dbi)
        let flags = append ? UInt32(MDB_APPEND) : 0
        let rc = Self.withValues(key, value) { k, v in
            if let cursor { mdb_cursor_put(cursor, &k, &v, flags) } else { mdb_put(txn, db.dbi, &k, &v, flags) }
        }
        try StorageError.check(rc, "mdb_put")
    }

    /// A cursor on database `dbi` in this transaction; the caller closes it
    /// (`mdb_cursor_close`) before the transaction ends.
    func openCursor(_ dbi: MDB_dbi) throws(StorageError) -> OpaquePointer? {
        var cursor: OpaquePointer?
        try StorageError.check(mdb_cursor_open(txn, dbi, &cursor), "mdb_cursor_open")
        return cursor
    }

    /// Runs `body` with LMDB values pointing at `key`'s and `value`'s bytes,
    /// valid only inside it.
    private static func withValues(_ key: [UInt8], _ value: [UInt8], _ body: (inout MDB_val, inout MDB_val) -> Int32) -> Int32 {
        key.withUnsafeBytes { kb in
            value.withUnsafeBytes { vb in
                var k = MDB_val(mv_size: kb.count, mv_data: UnsafeMutableRawPointer(mutating: kb.baseAddress))
                var v = MDB_val(mv_size: vb.count, mv_data: UnsafeMutableRawPointer(mutating: vb.baseAddress))
                return body(&k, &v)
            }
        }
    }

    /// `put` from raw buffers (bulk writers that pack many entries into one
    /// buffer).
    public func put(
        _ db: Database, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, append: Bool = false
    ) throws(StorageError) {
        changes?.wrote(db.dbi, key)
        var k = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var v = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let flags = append ? UInt32(MDB_APPEND) : 0
        if let cursor = try points?.cursor(db.dbi) {
            try StorageError.check(mdb_cursor_put(cursor, &k, &v, flags), "mdb_put")
        } else {
            try StorageError.check(mdb_put(txn, db.dbi, &k, &v, flags), "mdb_put")
        }
    }

    @discardableResult
    public func delete(_ db: Database, _ key: [UInt8]) throws(StorageError) -> Bool {
        changes?.wrote(db.dbi, key)
        var k = MDB_val()
        var v = MDB_val()
        let cursor = try points?.cursor(db.dbi)
        let rc: Int32 = key.withUnsafeBytes { kb in
            k.mv_size = kb.count
            k.mv_data = UnsafeMutableRawPointer(mutating: kb.baseAddress)
            guard let cursor else { return mdb_del(txn, db.dbi, &k, nil) }
            // What `mdb_del` does, on the kept cursor: every value of a
            // key with duplicates goes.
            let found = mdb_cursor_get(cursor, &k, &v, MDB_SET)
            return found == 0 ? mdb_cursor_del(cursor, UInt32(MDB_NODUPDATA)) : found
        }
        if rc == MDB_NOTFOUND { return false }
        try StorageError.check(rc, "mdb_del")
        return true
    }

    /// Visits entries in key order starting at the first key >= `from`
    /// (or the first key), until `body` returns false.
    public func scan(
        _ db: Database, from: [UInt8]? = nil, _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool
    ) throws {
        try scanInPlace(db, from: from) { k, v in try body(Array(k), Array(v)) }
    }

    /// Up to `count` entries of `db` in (key, value) order after `cursor`,
    /// going round to the first entry at the end but never back past
    /// `cursor`: the next stretch of a walk round the database. With a nil
    /// `cursor.value`, every entry under `cursor.key` counts as passed.
    /// Copied, so the caller may write next (LMDB's in-place bytes last
    /// only until the transaction's next write).
    public func entriesAfter(
        _ db: Database, cursor: (key: [UInt8], value: [UInt8]?)?, count: Int
    ) throws -> [(key: [UInt8], value: [UInt8])] {
        var out: [(key: [UInt8], value: [UInt8])] = []
        guard count > 0 else { return out }
        recorder?.record(.all(db.dbi))
        out.reserveCapacity(count)
        func passed(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Bool {
            guard let cursor else { return false }
            if key.lexicographicallyPrecedes(cursor.key) { return true }
            guard key.elementsEqual(cursor.key) else { return false }
            guard let at = cursor.value else { return true }
            return !at.lexicographicallyPrecedes(value)
        }
        try scanInPlace(db, from: cursor?.key) { key, value in
            if passed(key, value) { return true }
            out.append((Array(key), Array(value)))
            return out.count < count
        }
        if out.count < count, cursor != nil {
            try scanInPlace(db) { key, value in
                guard passed(key, value) else { return false }
                out.append((Array(key), Array(value)))
                return out.count < count
            }
        }
        return out
    }

    /// Visits entries in key order starting at the first key >= `from`
    /// (or the first key), with their bytes where LMDB holds them (valid
    /// only inside `body`), until `body` returns false: for a pass over a
    /// whole table that copies nothing it does not keep.
    public func scanInPlace(
        _ db: Database, from: [UInt8]? = nil, _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        guard let recorder else { return try scanInPlace(db, from: from, recording: nil, body) }
        var region = KeyRegion.scan(db.dbi, from: from ?? [], through: nil)
        defer { recorder.record(region) }
        try scanInPlace(db, from: from, recording: { last in region = .scan(db.dbi, from: from ?? [], through: last) }, body)
    }

    /// `scanInPlace`, telling `recording` the key at which `body` stopped
    /// the walk (the end of what it depended on).
    private func scanInPlace(
        _ db: Database, from: [UInt8]?, recording: ((UnsafeRawBufferPointer) -> Void)?,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let cursor = try openCursor(db.dbi)
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        var rc: Int32
        if let from {
            rc = from.withUnsafeBytes { kb in
                k.mv_size = kb.count
                k.mv_data = UnsafeMutableRawPointer(mutating: kb.baseAddress)
                return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
            }
        } else {
            rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        }
        while rc == 0 {
            let key = UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size)
            if try !body(key, UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size)) {
                recording?(key)
                return
            }
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
    }

    /// Whether `db` here and `otherDB` in `other` (a transaction of any
    /// environment) hold exactly the same keys with the same values. Both
    /// are walked in key order side by side, comparing the bytes in place:
    /// nothing is copied.
    public func hasSameEntries(_ db: Database, as otherDB: Database, in other: Transaction) throws(StorageError) -> Bool {
        recorder?.record(.all(db.dbi))
        other.recorder?.record(.all(otherDB.dbi))
        let mine = try openCursor(db.dbi)
        defer { mdb_cursor_close(mine) }
        let theirs = try other.openCursor(otherDB.dbi)
        defer { mdb_cursor_close(theirs) }
        var (k1, v1, k2, v2) = (MDB_val(), MDB_val(), MDB_val(), MDB_val())
        var rc1 = mdb_cursor_get(mine, &k1, &v1, MDB_FIRST)
        var rc2 = mdb_cursor_get(theirs, &k2, &v2, MDB_FIRST)
        while rc1 == 0 && rc2 == 0 {
            guard Self.equal(k1, k2), Self.equal(v1, v2) else { return false }
            rc1 = mdb_cursor_get(mine, &k1, &v1, MDB_NEXT)
            rc2 = mdb_cursor_get(theirs, &k2, &v2, MDB_NEXT)
        }
        if rc1 != MDB_NOTFOUND { try StorageError.check(rc1, "mdb_cursor_get") }
        if rc2 != MDB_NOTFOUND { try StorageError.check(rc2, "mdb_cursor_get") }
        return rc1 == rc2
    }

    private static func equal(_ a: MDB_val, _ b: MDB_val) -> Bool {
        guard a.mv_size == b.mv_size else { return false }
        guard a.mv_size > 0, let x = a.mv_data, let y = b.mv_data else { return true }
        return memcmp(x, y, a.mv_size) == 0
    }

    /// The last entry of a database, if any.
    public func last(_ db: Database) throws(StorageError) -> (key: [UInt8], value: [UInt8])? {
        let cursor = try openCursor(db.dbi)
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        let rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST)
        if rc == MDB_NOTFOUND {
            recorder?.record(.all(db.dbi))
            return nil
        }
        try StorageError.check(rc, "mdb_cursor_get")
        let key = Self.copy(k)
        recorder?.record(KeyRegion(database: db.dbi, lower: key, upper: nil, shared: []))
        return (key, Self.copy(v))
    }

    /// The entries whose key starts with `prefix`, in key order, copied. In
    /// a write transaction it reads with the database's point cursor
    /// (`PointCursors`), so lookups of nearby prefixes in key order search
    /// one leaf instead of descending from the root; nothing runs while
    /// the cursor is in use, so no caller can move it mid-walk.
    public func entries(_ db: Database, prefix: [UInt8]) throws(StorageError) -> [(key: [UInt8], value: [UInt8])] {
        recorder?.record(.prefix(db.dbi, prefix))
        var out: [(key: [UInt8], value: [UInt8])] = []
        if let kept = try points?.cursor(db.dbi) {
            try Self.collect(kept, prefix: prefix, into: &out)
        } else {
            let cursor = try openCursor(db.dbi)
            defer { mdb_cursor_close(cursor) }
            try Self.collect(cursor, prefix: prefix, into: &out)
        }
        return out
    }

    private static func collect(
        _ cursor: OpaquePointer?, prefix: [UInt8], into out: inout [(key: [UInt8], value: [UInt8])]
    ) throws(StorageError) {
        var k = MDB_val()
        var v = MDB_val()
        var rc: Int32 = prefix.withUnsafeBytes { kb in
            k.mv_size = kb.count
            k.mv_data = UnsafeMutableRawPointer(mutating: kb.baseAddress)
            return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
        }
        while rc == 0 {
            let key = UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size)
            guard key.starts(with: prefix) else { return }
            out.append((Array(key), copy(v)))
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
    }

    /// Visits the entries whose key starts with `prefix`, in key order,
    /// until `body` returns false.
    public func scan(
        _ db: Database, prefix: [UInt8], _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool
    ) throws {
        var stoppedAt: [UInt8]? = nil
        defer { recorder?.record(.prefix(db.dbi, prefix, upper: stoppedAt.map { $0 + [0] })) }
        try scanInPlace(db, from: prefix, recording: nil) { k, v in
            guard k.starts(with: prefix) else { return false }
            let key = Array(k)
            if try !body(key, Array(v)) {
                stoppedAt = key
                return false
            }
            return true
        }
    }

    /// Visits the entries whose key starts with `prefix`, in key order,
    /// with their bytes where LMDB holds them (valid only inside `body`),
    /// until `body` returns false: `scan(_:prefix:_:)` without a copy of
    /// what the caller does not keep.
    public func scanInPlace(
        _ db: Database, prefix: [UInt8], _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        var stoppedAt: [UInt8]? = nil
        defer { recorder?.record(.prefix(db.dbi, prefix, upper: stoppedAt.map { $0 + [0] })) }
        try scanInPlace(db, from: prefix, recording: nil) { k, v in
            guard k.starts(with: prefix) else { return false }
            if try !body(k, v) {
                stoppedAt = Array(k)
                return false
            }
            return true
        }
    }

    /// Visits the entries with key starting with `prefix` and below `before`
    /// (or all of them), newest key first, until `body` returns false.
    public func scanBackward(
        _ db: Database, prefix: [UInt8], before: [UInt8]? = nil,
        _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool
    ) throws {
        recorder?.record(.prefix(db.dbi, prefix, upper: before))
        let cursor = try openCursor(db.dbi)
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        var rc = Self.seekNewest(cursor, prefix: prefix, before: before, &k, &v)
        while rc == 0 {
            let key = Self.copy(k)
            guard key.starts(with: prefix) else { return }
            if try !body(key, Self.copy(v)) { return }
            rc = mdb_cursor_get(cursor, &k, &v, MDB_PREV)
        }
        if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
    }

    /// Puts `cursor` on the newest key starting with `prefix` and below
    /// `before` (if given), with `k` and `v` on its entry; `MDB_NOTFOUND`
    /// when there is none.
    static func seekNewest(_ cursor: OpaquePointer?, prefix: [UInt8], before: [UInt8]?, _ k: inout MDB_val, _ v: inout MDB_val) -> Int32 {
        // Start at the first key >= the upper bound, then step back once.
        let upper = before ?? KeyRegion.successor(of: prefix) ?? []
        var rc: Int32
        if upper.isEmpty {
            rc = mdb_cursor_get(cursor, &k, &v, MDB_LAST)
        } else {
            rc = upper.withUnsafeBytes { kb in
                k.mv_size = kb.count
                k.mv_data = UnsafeMutableRawPointer(mutating: kb.baseAddress)
                return mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
            }
            rc = rc == MDB_NOTFOUND ? mdb_cursor_get(cursor, &k, &v, MDB_LAST) : mdb_cursor_get(cursor, &k, &v, MDB_PREV)
        }
        while rc == 0 {
            let key = copy(k)
            if let before, !key.lexicographicallyPrecedes(before) {
                rc = mdb_cursor_get(cursor, &k, &v, MDB_PREV)
                continue
            }
            return key.starts(with: prefix) ? 0 : MDB_NOTFOUND
        }
        return rc
    }

    /// Deletes every entry whose key starts with `prefix`, or the first
    /// `limit` of them (the keys are held until deleted); returns how many.
    @discardableResult
    public func deletePrefix(_ db: Database, _ prefix: [UInt8], limit: Int = .max) throws -> Int {
        var keys: [[UInt8]] = []
        try scan(db, prefix: prefix) { key, _ in
            keys.append(key)
            return keys.count < limit
        }
        for key in keys { try delete(db, key) }
        return keys.count
    }

    /// Deletes every entry of a database.
    public func clear(_ db: Database) throws(StorageError) {
        changes?.wroteAll(db.dbi)
        points?.forget(db.dbi)
        try StorageError.check(mdb_drop(txn, db.dbi, 0), "mdb_drop")
    }

    /// Deletes a database and its name from the environment (its handle is
    /// closed: do not use it again).
    public func drop(_ db: Database) throws(StorageError) {
        changes?.wroteAll(db.dbi)
        points?.forget(db.dbi)
        try StorageError.check(mdb_drop(txn, db.dbi, 1), "mdb_drop")
    }

    public func count(_ db: Database) throws(StorageError) -> Int {
        recorder?.record(.all(db.dbi))
        var stat = MDB_stat()
        try StorageError.check(mdb_stat(txn, db.dbi, &stat), "mdb_stat")
        return stat.ms_entries
    }

    static func copy(_ v: MDB_val) -> [UInt8] {
        guard let data = v.mv_data, v.mv_size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: v.mv_size))
    }

    /// Runs `body` with a set of backward walks over `db`, each over the
    /// keys with one prefix, newest first; every cursor is closed when
    /// `body` returns. A merge of many ranges (a feed of followed users'
    /// pictures) steps each walk back from where it stopped instead of
    /// searching from the root again.
    public func withBackwardWalks<T>(_ db: Database, _ body: (inout BackwardWalks) throws -> T) throws -> T {
        var walks = BackwardWalks(txn: self, db: db)
        defer { walks.closeAll() }
        return try body(&walks)
    }
}

/// The cursors of one write transaction for its point reads and writes
/// (`get`, `put`, `delete`), one per database, kept open until it ends
/// (Specs/storage.md §5.1). `mdb_get`, `mdb_put` and `mdb_del` start a
/// fresh cursor each time, which descends from the root and looks every
/// page of the path up in the transaction's dirty list; a cursor still
/// standing on a leaf searches only that leaf when the next key falls
/// inside it (LMDB's `mdb_cursor_set`), as appends, a feed's positions, a
/// commit's sorted id index entries and a chat's new messages mostly do.
/// LMDB keeps a write transaction's cursors consistent with its other
/// writes. Only the thread that began the transaction uses them (LMDB's
/// transactions are not shared across threads); any other gets LMDB's own
/// calls.
final class PointCursors {
    private let txn: OpaquePointer
    private let owner = pthread_self()
    private var cursors: [OpaquePointer?] = []

    init(txn: OpaquePointer) { self.txn = txn }

    /// The cursor for `dbi`, opened on first use; nil off the owning thread.
    func cursor(_ dbi: MDB_dbi) throws(StorageError) -> OpaquePointer? {
        guard pthread_equal(owner, pthread_self()) != 0 else { return nil }
        let i = Int(dbi)
        if i < cursors.count, let cursor = cursors[i] { return cursor }
        if i >= cursors.count { cursors.append(contentsOf: repeatElement(nil, count: i + 1 - cursors.count)) }
        var cursor: OpaquePointer?
        try StorageError.check(mdb_cursor_open(txn, dbi, &cursor), "mdb_cursor_open")
        cursors[i] = cursor
        return cursor
    }

    func forget(_ dbi: MDB_dbi) {
        let i = Int(dbi)
        guard i < cursors.count, let cursor = cursors[i] else { return }
        mdb_cursor_close(cursor)
        cursors[i] = nil
    }

    /// Closes every cursor; before the transaction commits or aborts.
    func closeAll() {
        for cursor in cursors { if let cursor { mdb_cursor_close(cursor) } }
        cursors = []
    }
}

/// Backward walks over key ranges of one database, inside one transaction
/// (`Transaction.withBackwardWalks`).
public struct BackwardWalks {
    let txn: Transaction
    let db: Database
    private var cursors: [OpaquePointer] = []
    private var prefixes: [[UInt8]] = []

    init(txn: Transaction, db: Database) {
        self.txn = txn
        self.db = db
    }

    /// Starts a walk over the keys starting with `prefix` and below `before`
    /// (all of them when nil); returns its number and its newest key, or nil
    /// (and no walk) when there is none.
    public mutating func start(prefix: [UInt8], before: [UInt8]? = nil) throws -> (walk: Int, key: [UInt8])? {
        txn.recorder?.record(.prefix(db.dbi, prefix, upper: before))
        guard let cursor = try txn.openCursor(db.dbi) else { return nil }
        var k = MDB_val()
        var v = MDB_val()
        let rc = Transaction.seekNewest(cursor, prefix: prefix, before: before, &k, &v)
        guard rc == 0 else {
            mdb_cursor_close(cursor)
            if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
            return nil
        }
        cursors.append(cursor)
        prefixes.append(prefix)
        return (cursors.count - 1, Transaction.copy(k))
    }

    /// The key before the one walk `walk` stands on, within its prefix; nil
    /// at the start of its range.
    public func previous(_ walk: Int) throws -> [UInt8]? {
        var k = MDB_val()
        var v = MDB_val()
        let rc = mdb_cursor_get(cursors[walk], &k, &v, MDB_PREV)
        if rc == MDB_NOTFOUND { return nil }
        try StorageError.check(rc, "mdb_cursor_get")
        let key = Transaction.copy(k)
        return key.starts(with: prefixes[walk]) ? key : nil
    }

    mutating func closeAll() {
        for cursor in cursors { mdb_cursor_close(cursor) }
        cursors = []
        prefixes = []
    }
}

/// A pthread read-write lock: many transactions at once, or one resize.
final class ReadWriteLock: @unchecked Sendable {
    private let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    init() { pthread_rwlock_init(lock, nil) }
    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }
    func lockShared() { pthread_rwlock_rdlock(lock) }
    func lockExclusive() { pthread_rwlock_wrlock(lock) }
    func unlock() { pthread_rwlock_unlock(lock) }
}

extension StorageError {
    /// A stable, machine-readable name of the error, in snake case.
    public var code: String {
        switch self {
        case .lmdb: "storage_error"
        case .diskFull: "disk_full"
        case .writeFailed: "write_failed"
        case .cannotCreateDirectory: "cannot_create_directory"
        case .readOnly: "read_only"
        case .closed: "closed"
        case .alreadyOpenInProcess: "already_open_in_process"
        }
    }
}

/// The read transactions `readAsOneSnapshot` pinned on the current thread,
/// innermost last. Thread-local, not task-local: `body` is synchronous, and
/// a task it started must not inherit a transaction aborted when it returns.
private enum PinnedReads {
    final class Stack {
        var entries: [(env: ObjectIdentifier, txn: OpaquePointer)] = []
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { if let stack = $0 { Unmanaged<Stack>.fromOpaque(stack).release() } }
        return key
    }()

    private static var stack: Stack? {
        pthread_getspecific(key).map { Unmanaged<Stack>.fromOpaque($0).takeUnretainedValue() }
    }

    static func transaction(of env: Environment) -> OpaquePointer? {
        guard let stack, !stack.entries.isEmpty else { return nil }
        let id = ObjectIdentifier(env)
        return stack.entries.last { $0.env == id }?.txn
    }

    static func push(_ env: Environment, _ txn: OpaquePointer) {
        let current: Stack
        if let stack { current = stack } else {
            current = Stack()
            pthread_setspecific(key, Unmanaged.passRetained(current).toOpaque())
        }
        current.entries.append((ObjectIdentifier(env), txn))
    }

    static func pop() { stack?.entries.removeLast() }
}
