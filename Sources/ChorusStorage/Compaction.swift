import CLMDB
import Foundation

extension Environment {
    /// Writes a compacted copy of the environment (one snapshot, free
    /// pages left out, pages renumbered; `MDB_CP_COMPACT`) as `data.mdb`
    /// in `directory`, which must exist and hold no store, and flushes it
    /// to disk. Readers and the writer go on meanwhile.
    public func copyCompacted(to directory: String) throws(StorageError) {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        if isClosed { throw .closed }
        try StorageError.check(mdb_env_copy2(env, directory, UInt32(MDB_CP_COMPACT)), "mdb_env_copy2(\(directory))")
        try Self.restrictToOwner(directory + "/data.mdb")
        let fd = Foundation.open(directory + "/data.mdb", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .writeFailed(operation: "open(\(directory)/data.mdb)") }
        defer { Foundation.close(fd) }
        // mdb_env_copy2 does not flush what it wrote.
        guard fsync(fd) == 0 else { throw .writeFailed(operation: "fsync(\(directory)/data.mdb)") }
    }

    /// Makes a data file LMDB copied (`mdb_env_copy2` creates it readable
    /// by all, 0666 less the umask) its owner's alone, as `Environment`
    /// creates a store's own.
    static func restrictToOwner(_ file: String) throws(StorageError) {
        guard chmod(file, 0o600) == 0 else {
            let code = errno
            throw .lmdb(code: code, operation: "chmod(\(file))", message: String(cString: strerror(code)))
        }
    }

    /// A process other than this one that has the store at `path` open
    /// (its pid), or nil. Every LMDB environment holds a shared lock on the
    /// first byte of `lock.mdb` while open; this process's own locks never
    /// count. Call it only while this process does not have the store open:
    /// closing the probe's descriptor releases every `fcntl` lock the
    /// process holds on the file, LMDB's included.
    public static func openInAnotherProcess(_ path: String) throws(StorageError) -> Int32? {
        let fd = Foundation.open(path + "/lock.mdb", O_RDWR | O_CLOEXEC)
        if fd < 0 { return nil }  // never opened, or already gone
        defer { Foundation.close(fd) }
        var probe = flock()
        probe.l_type = Int16(F_WRLCK)
        probe.l_whence = Int16(SEEK_SET)
        probe.l_start = 0
        probe.l_len = 1
        guard fcntl(fd, F_GETLK, &probe) == 0 else { throw .lmdb(code: errno, operation: "fcntl(F_GETLK)", message: String(cString: strerror(errno))) }
        return probe.l_type == Int16(F_UNLCK) ? nil : probe.l_pid
    }
}
