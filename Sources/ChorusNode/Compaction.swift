import ChorusBlobs
import ChorusCrypto
import ChorusLog
import ChorusProjections
import ChorusStorage
import ChorusStore
import Foundation

/// What `Node.compact` did.
package struct Compaction: Sendable {
    /// The store file's size before, in bytes.
    package let bytesBefore: Int
    /// The store file's size after, in bytes: the pages in use.
    package let bytesAfter: Int
    /// Events in the store, the same before and after.
    package let events: Int
    /// The projection digest, the same before and after.
    package let digest: Hash32
}

extension Node {
    /// Rewrites the store's file without its free pages (Specs/storage.md
    /// §7): LMDB never gives pages back to the file system, so after a large
    /// import or first sync the file keeps about one large commit's worth of
    /// old page copies. The compacted copy is written beside the store,
    /// flushed, checked (the same events and projection digest) and only
    /// then renamed over the store's file, so a compaction cut short at any
    /// moment leaves the store as it was. Takes the writer lock, and refuses
    /// while any other process has the store open (a reader would go on
    /// reading the old file). Needs free disk space for the pages in use.
    package static func compact(
        at path: String, options: NodeOptions = NodeOptions(), progress: (@Sendable (_ stage: String, _ step: Int, _ steps: Int) -> Void)? = nil
    ) async throws -> Compaction {
        let file = path + "/data.mdb"
        guard FileManager.default.fileExists(atPath: file) else { throw NodeError.notInitialized(path: path) }
        if Environment.isOpenInProcess(path) { throw StorageError.alreadyOpenInProcess(path: path) }
        let fd = try await lockForWriting(path: path, options: options)
        defer { Foundation.close(fd) }
        // Asked before this process opens the store: the probe's descriptor
        // would drop LMDB's own lock on lock.mdb when closed.
        if let pid = try Environment.openInAnotherProcess(path) { throw NodeError.storeOpenElsewhere(path: path, pid: pid) }
        let mapSize = options.initialMapSize
        return try await runOnOwnThread("chorus-compact") { _ in
            let fm = FileManager.default
            let work = path + "/compacting"
            try? fm.removeItem(atPath: work)  // left by a compaction cut short
            do { try fm.createDirectory(atPath: work, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700]) } catch {
                throw StorageError.cannotCreateDirectory(path: work, reason: error.localizedDescription)
            }
            defer { try? fm.removeItem(atPath: work) }
            let bytesBefore = Self.fileSize(file)
            let configPath = path + "/" + NetworkConfig.fileName
            let config = fm.fileExists(atPath: configPath) ? try NetworkConfig.load(from: configPath) : NetworkConfig()

            progress?("copying the pages in use", 1, 2)
            let before: (events: Int, digest: Hash32)
            do {
                let env = try Environment(path: path, initialMapSize: mapSize, readOnly: true)
                defer { env.close() }
                try env.copyCompacted(to: work)
                progress?("checking the copy", 2, 2)
                before = try Self.contents(env, config)
            }
            do {
                let env = try Environment(path: work, initialMapSize: mapSize, readOnly: true)
                defer { env.close() }
                let after = try Self.contents(env, config)
                guard after == before else {
                    throw NodeError.compactionCheckFailed(
                        path: path, detail: "\(after.events) events and digest \(after.digest.short) against \(before.events) and \(before.digest.short)")
                }
            }
            guard rename(work + "/data.mdb", file) == 0 else {
                throw StorageError.writeFailed(operation: "rename(\(work)/data.mdb, \(file)): \(String(cString: strerror(errno)))")
            }
            // The rename is durable once the directory is flushed.
            let dir = Foundation.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if dir >= 0 {
                defer { Foundation.close(dir) }
                guard fsync(dir) == 0 else { throw StorageError.writeFailed(operation: "fsync(\(path))") }
            }
            return Compaction(bytesBefore: bytesBefore, bytesAfter: Self.fileSize(file), events: before.events, digest: before.digest)
        }
    }

    private static func contents(_ env: Environment, _ config: NetworkConfig) throws -> (events: Int, digest: Hash32) {
        let store = try Store(env: env, config: config)
        return (try store.log.eventCount(), try store.projections.digest())
    }

    private static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }
}
