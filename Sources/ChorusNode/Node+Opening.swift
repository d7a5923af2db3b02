import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusProjections
import ChorusStorage
import ChorusStore
import Foundation
import Synchronization

/// Creating, opening, locking and upgrading a store: how a `Node` comes to
/// be (Specs/storage.md §1, §4, §6).
extension Node {
    /// `create(at:)` for a path (the command line's form).
    package static func create(
        at path: String, deviceName: String? = nil, network: NetworkConfig,
        options: NodeOptions = NodeOptions()
    ) async throws -> Node {
        try prepareDirectory(path, network: network)
        return try await createIdentity(at: path, deviceName: deviceName, options: options)
    }

    /// A prepared directory's user and device keys, and the device bound.
    static func createIdentity(at path: String, deviceName: String?, options: NodeOptions) async throws -> Node {
        let user = SigningKey.generate()
        let device = SigningKey.generate()
        try KeyStore.write(user, to: KeyStore.userKeyPath(path))
        try KeyStore.write(device, to: KeyStore.deviceKeyPath(path))
        let node = try await open(at: path, options: options)
        _ = try await node.addDevice(
            DeviceID(device.publicKey), proof: DeviceBinding.proof(device: device, user: user.publicKey), name: deviceName)
        return node
    }

    /// `createDevice(at:user:)` for a path (the command line's form).
    package static func createDevice(
        at path: String, user: UserID, network: NetworkConfig, options: NodeOptions = NodeOptions()
    ) async throws -> Node {
        try prepareDirectory(path, network: network)
        try KeyStore.write(SigningKey.generate(), to: KeyStore.deviceKeyPath(path))
        try KeyStore.writePublic(user.raw, to: KeyStore.userPublicPath(path))
        return try await open(at: path, options: options)
    }

    static func prepareDirectory(_ path: String, network: NetworkConfig) throws {
        let fm = FileManager.default
        if fm.fileExists(atPath: KeyStore.deviceKeyPath(path)) { throw NodeError.alreadyInitialized(path: path) }
        if let problem = network.problems.first { throw NetworkConfigError.invalid(source: "the given configuration", reason: problem) }
        do {
            try fm.createDirectory(atPath: KeyStore.keysDirectory(path), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
            chmod(path, 0o700)
        } catch {
            throw StorageError.cannotCreateDirectory(path: path, reason: error.localizedDescription)
        }
        try network.write(to: path + "/" + NetworkConfig.fileName)
    }

    /// `open(at:)` for a path (the command line's form).
    package static func open(at path: String, readOnly: Bool = false, options: NodeOptions = NodeOptions()) async throws
        -> Node
    {
        guard FileManager.default.fileExists(atPath: KeyStore.deviceKeyPath(path)) else {
            // Data without its device key is not an uninitialised store:
            // `init` would refuse it, and the fix is to restore the key.
            if FileManager.default.fileExists(atPath: path + "/data.mdb") {
                throw NodeError.keyFile(
                    path: KeyStore.deviceKeyPath(path),
                    problem: "missing, although the store holds data: restore the store's keys/ directory from a backup; without its device key this store cannot be opened (a new device needs a new store)")
            }
            throw NodeError.notInitialized(path: path)
        }
        // Before the writer lock, which would blame another process.
        if Environment.isOpenInProcess(path) { throw StorageError.alreadyOpenInProcess(path: path) }
        var fd: Int32 = -1
        if !readOnly { fd = try await lockForWriting(path: path, options: options) }
        var fdOwnedByNode = false
        var opened: Environment? = nil
        do {
            let env = try Environment(path: path, initialMapSize: options.initialMapSize, readOnly: readOnly)
            opened = env
            let store = try Store(
                env: env, config: try Store.configuration(ofStoreAt: path, writeDefault: !readOnly), recentMinimum: nil,
                supplyLimit: options.supplyLimit)
            let (log, projections) = (store.log, store.projections)
            if let why = try projections.staleness() {
                guard !readOnly else { throw NodeError.projectionsStale(path: path) }
                options.onRebuild?(why, try log.eventCount())
                // Minutes on a large store: on a thread of its own, not one of
                // the cooperative pool's few, and cancellable.
                let progress = options.rebuildProgress
                try await runOnOwnThread("chorus-rebuild") { cancelled in
                    try store.rebuild(progress: progress, isCancelled: cancelled)
                }
            }
            let device = try KeyStore.read(KeyStore.deviceKeyPath(path))
            let fm = FileManager.default
            let userSecret = fm.fileExists(atPath: KeyStore.userKeyPath(path)) ? try KeyStore.read(KeyStore.userKeyPath(path)) : nil
            let userPublic = try userSecret?.publicKey ?? KeyStore.readPublic(KeyStore.userPublicPath(path))
            let issuer = fm.fileExists(atPath: KeyStore.issuerKeyPath(path)) ? try KeyStore.read(KeyStore.issuerKeyPath(path)) : nil
            // A store from before end-to-end encryption gets its device's
            // X25519 key on its first writable open (Specs/encryption.md §3).
            let agreementPath = KeyStore.encryptionKeyPath(path)
            var agreement: AgreementKey? = nil
            if fm.fileExists(atPath: agreementPath) {
                agreement = try KeyStore.readAgreement(agreementPath)
            } else if !readOnly {
                let fresh = AgreementKey.generate()
                try KeyStore.write(fresh, to: agreementPath)
                agreement = fresh
            }
            let node = Node(
                path: path, store: store, user: userPublic, userKey: userSecret, device: device,
                issuer: issuer, agreement: agreement, lockFD: fd, readOnly: readOnly, options: options)
            // From here the node owns the lock's descriptor: closing it here too
            // would close whatever file reuses the number next.
            fdOwnedByNode = true
            opened = nil
            if !readOnly {
                do { try await node.publishEncryptionKeyIfNeeded() } catch {
                    await node.close()
                    throw error
                }
            }
            return node
        } catch {
            // Closed here, not when the last reference goes: a cancelled
            // rebuild's thread may still hold one for a moment, and the
            // store must open again at once.
            opened?.close()
            if fd >= 0, !fdOwnedByNode { Foundation.close(fd) }
            throw error
        }
    }

    /// Opens `writer.lock` and takes it (`takeWriterLock`); returns its
    /// descriptor, which holds the lock until the caller closes it.
    static func lockForWriting(path: String, options: NodeOptions) async throws -> Int32 {
        let fd = Foundation.open(path + "/writer.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StorageError.cannotCreateDirectory(path: path, reason: String(cString: strerror(errno))) }
        do { try await takeWriterLock(fd, path: path, options: options) } catch {
            Foundation.close(fd)
            throw error
        }
        return fd
    }

    /// Takes the store's writer lock, waiting up to `options.writerLockWait`
    /// for another process to release it (polling: a blocking `flock` would
    /// hold a cooperative thread). Tells `options.onWaitingForWriterLock` once
    /// when the wait passes a second.
    private static func takeWriterLock(_ fd: Int32, path: String, options: NodeOptions) async throws {
        if flock(fd, LOCK_EX | LOCK_NB) == 0 { return }
        let clock = ContinuousClock()
        let start = clock.now
        var told = false
        var pause = Duration.milliseconds(2)
        while clock.now - start < options.writerLockWait {
            if !told, clock.now - start > .seconds(1) {
                told = true
                options.onWaitingForWriterLock?()
            }
            // Short, growing, jittered pauses: many waiting writers do not wake in step.
            try await Task.sleep(for: pause * Double.random(in: 0.5...1.5))
            pause = min(pause * 2, .milliseconds(50))
            if flock(fd, LOCK_EX | LOCK_NB) == 0 { return }
        }
        throw NodeError.storeInUse(path: path)
    }

    /// The store format this build writes (Specs/storage.md §4).
    package static let storeFormat = LogStore.formatVersion

    /// Upgrades a store written by an older format to the current one
    /// (Specs/storage.md §4.1), keeping every event, blob and key; returns
    /// false when it is already current. Takes the writer lock, so it never
    /// runs beside a node that writes the store. The projections are folded
    /// again on the next read-write `open` (with its progress). Runs on a
    /// thread of its own and can be cancelled; an interrupted upgrade
    /// resumes where it stopped. `progress` counts the entries copied over
    /// every step the store needs.
    public static func upgrade(
        at url: URL, options: NodeOptions = NodeOptions(), progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    ) async throws -> Bool {
        guard url.isFileURL else { throw NodeError.notAFileURL(url.absoluteString) }
        return try await upgrade(at: url.path, options: options, progress: progress)
    }

    /// `upgrade(at:)` for a path (the command line's form).
    package static func upgrade(
        at path: String, options: NodeOptions = NodeOptions(), progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    ) async throws -> Bool {
        guard FileManager.default.fileExists(atPath: path + "/data.mdb") else { throw NodeError.notInitialized(path: path) }
        let fd = try await lockForWriting(path: path, options: options)
        defer { Foundation.close(fd) }
        let mapSize = options.initialMapSize
        return try await runOnOwnThread("chorus-upgrade") { cancelled in
            let env = try Environment(path: path, initialMapSize: mapSize)
            guard let from = try LogStore.upgrade(env: env, progress: progress, isCancelled: cancelled) else { return false }
            // A format 1 store's projections are folded again (Specs/storage.md
            // §4.1); from formats 2, 3 and 4 only an index of the log changes
            // (§4.2–§4.4), and arrival positions stay.
            if from < 2 { try Projections.markStale(env: env) }
            return true
        }
    }

}
