import CLMDB
import Foundation

extension Environment {
    /// Copies the whole environment page for page (LMDB's hot copy,
    /// `mdb_env_copy2`, without compaction) into `directory`, which must
    /// hold no `data.mdb`, provided the copy is of the snapshot `snapshot`
    /// reads. Returns false, and removes what it wrote, when a writer
    /// committed while it copied: LMDB's copy reads a snapshot of its own,
    /// which is then perhaps a later one. Far cheaper than `copyDatabases`
    /// (the kernel writes the pages as they are; no B-tree is built), but
    /// it copies every database, free pages included. LMDB takes the
    /// writers' lock for a moment to read the meta pages, so it waits for
    /// a commit in progress, and must not be called while this process
    /// holds a write transaction of the environment.
    public func copyWhole(to directory: String, asOf snapshot: Transaction) throws -> Bool {
        let snapshotID = mdb_txn_id(snapshot.txn)
        // A copy cut short (a full disk) leaves no partial data file behind.
        do { try StorageError.check(mdb_env_copy2(env, directory, 0), "mdb_env_copy2(\(directory))") } catch {
            try? FileManager.default.removeItem(atPath: directory + "/data.mdb")
            throw error
        }
        do { try Self.restrictToOwner(directory + "/data.mdb") } catch {
            try? FileManager.default.removeItem(atPath: directory + "/data.mdb")
            throw error
        }
        // The copy's snapshot is at least `snapshot`'s and at most the
        // last committed: the same when nothing was committed since.
        var info = MDB_envinfo()
        try StorageError.check(mdb_env_info(env, &info), "mdb_env_info")
        if info.me_last_txnid == snapshotID { return true }
        try? FileManager.default.removeItem(atPath: directory + "/data.mdb")
        return false
    }

    /// The names of the environment's named databases, in order.
    public func databaseNames() throws -> [String] {
        try read { txn in
            var main: MDB_dbi = 0
            try StorageError.check(mdb_dbi_open(txn.txn, nil, 0, &main), "mdb_dbi_open(main)")
            var names: [String] = []
            try txn.scanInPlace(Database(dbi: main)) { key, _ in
                names.append(String(decoding: key, as: UTF8.self))
                return true
            }
            return names
        }
    }

    /// Deletes every named database but those in `names`, with its entries
    /// (a copy made whole, `copyWhole`, that should hold only some of them).
    public func dropDatabases(keeping names: Set<String>) throws {
        let others = try databaseNames().filter { !names.contains($0) }
        guard !others.isEmpty else { return }
        try write { txn in
            for name in others { try txn.drop(try txn.openDatabase(name, create: false)) }
        }
    }

    /// Bytes of the data file up to its last page in use: what
    /// `copyWhole` writes.
    public var usedBytes: Int { usedAndMapSize().used }

    /// Copies the databases `names` of `source` (one snapshot of it) into
    /// this environment in key order. A database that is empty here is
    /// filled by appending (`MDB_APPEND`, `MDB_APPENDDUP`), so its pages are
    /// written once, in order; one that already holds entries gets each
    /// entry put (a copied value replaces the one here). A database `source`
    /// lacks is skipped. Commits every `bytesPerCommit` bytes or so, at a key
    /// boundary, so no transaction outgrows LMDB's dirty-page limit.
    /// Returns the bytes of keys and values copied.
    @discardableResult
    public func copyDatabases(
        _ names: [String], from source: Environment, bytesPerCommit: Int = 64 << 20,
        progress: ((_ bytesCopied: Int) -> Void)? = nil
    ) throws -> Int {
        try source.read { snapshot in
            try copyDatabases(names, from: snapshot, bytesPerCommit: bytesPerCommit, progress: progress)
        }
    }

    /// `copyDatabases(_:from:)` from a read transaction of another
    /// environment, which the caller may go on reading (what it reads then
    /// is the snapshot copied).
    @discardableResult
    public func copyDatabases(
        _ names: [String], from snapshot: Transaction, bytesPerCommit: Int = 64 << 20,
        progress: ((_ bytesCopied: Int) -> Void)? = nil
    ) throws -> Int {
        var copied = 0
        for name in names {
            var dbi: MDB_dbi = 0
            let opened = mdb_dbi_open(snapshot.txn, name, 0, &dbi)
            if opened == MDB_NOTFOUND { continue }
            try StorageError.check(opened, "mdb_dbi_open(\(name))")
            var flags: UInt32 = 0
            try StorageError.check(mdb_dbi_flags(snapshot.txn, dbi, &flags), "mdb_dbi_flags(\(name))")
            let isDuplicates = flags & UInt32(MDB_DUPSORT) != 0
            guard !isDuplicates || flags & UInt32(MDB_DUPFIXED) != 0 else {
                throw StorageError.lmdb(code: -1, operation: "copyDatabases(\(name))", message: "only fixed-size duplicates are supported")
            }
            let target = try openDatabase(name, fixedSizeDuplicates: isDuplicates)
            let appending = try read { txn in try txn.count(target) } == 0

            // Where the next commit starts: after this key (and all its
            // values). It points into the source's map, valid while `snapshot` is.
            var resume: MDB_val? = nil
            while true {
                let batch = try write { txn in
                    try Self.copyBatch(
                        from: snapshot, dbi, to: txn, target, after: resume, appending: appending, duplicates: isDuplicates,
                        bytesPerCommit: bytesPerCommit)
                }
                copied += batch.bytes
                progress?(copied)
                guard let last = batch.last else { break }
                resume = last
            }
        }
        return copied
    }

    /// One commit's worth of `copyDatabases`: entries after `resume` until
    /// about `bytesPerCommit` bytes; `last` is nil once the database is done.
    /// Derives everything from its arguments, as `write` may run it again.
    private static func copyBatch(
        from: Transaction, _ dbi: MDB_dbi, to txn: Transaction, _ target: Database, after resume: MDB_val?,
        appending: Bool, duplicates: Bool, bytesPerCommit: Int
    ) throws -> (bytes: Int, last: MDB_val?) {
        let cursor = try from.openCursor(dbi)
        defer { mdb_cursor_close(cursor) }
        var k = MDB_val()
        var v = MDB_val()
        var rc: Int32
        if let resume {
            k = resume
            rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE)
            if rc == 0 && equal(k, resume) { rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT_NODUP) }
        } else {
            rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
        }
        var bytes = 0
        var previous: MDB_val? = nil
        txn.changes?.wroteAll(target.dbi)
        while rc == 0 {
            let sameKey = previous.map { equal($0, k) } ?? false
            // Stop only between keys: a resumed batch starts at the next key.
            if bytes >= bytesPerCommit && !sameKey { return (bytes, previous) }
            let flags: UInt32 =
                !appending ? 0 : duplicates && sameKey ? UInt32(MDB_APPENDDUP) : UInt32(MDB_APPEND)
            try StorageError.check(mdb_put(txn.txn, target.dbi, &k, &v, flags), "mdb_put")
            bytes += k.mv_size + v.mv_size
            previous = k
            rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
        }
        if rc != MDB_NOTFOUND { try StorageError.check(rc, "mdb_cursor_get") }
        return (bytes, nil)
    }

    private static func equal(_ a: MDB_val, _ b: MDB_val) -> Bool {
        guard a.mv_size == b.mv_size else { return false }
        guard a.mv_size > 0 else { return true }
        return memcmp(a.mv_data, b.mv_data, a.mv_size) == 0
    }
}
