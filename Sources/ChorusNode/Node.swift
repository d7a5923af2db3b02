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

/// Settings for creating, opening or upgrading a store. The defaults suit an
/// app; tests replace the clock and the sizes.
public struct NodeOptions: Sendable {
    /// How far ahead of this node's clock an event's timestamp may be (Specs/events.md §7.2).
    public var driftMillis: UInt64 = 60_000
    /// The LMDB map size to start from; it doubles whenever it fills.
    package var initialMapSize: Int = 256 << 20
    /// The wall clock in Unix milliseconds (replaceable in tests).
    public var clock: @Sendable () -> UInt64 = { UInt64(Date().timeIntervalSince1970 * 1000) }
    /// The largest picture this node stores (blob size cap).
    package var maxBlobBytes: Int = 16 << 20
    /// Told how far a rebuild of the projections has got, when opening a
    /// store whose projections are stale (an older store, or a changed
    /// network configuration) has to fold the whole log again.
    public var rebuildProgress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    /// Called once before such a rebuild starts, with why the stored
    /// projections are stale and how many events the log holds: a serving
    /// node logs it, since the rebuild may take minutes.
    public var onRebuild: (@Sendable (_ why: Staleness, _ events: Int) -> Void)? = nil
    /// How long a read-write `open` waits for another process that holds the
    /// store's writer lock before it fails with `NodeError.storeInUse`. The
    /// default is a moment: a lock is also held, briefly, by a child process
    /// that another thread of this process is starting (it shares the open
    /// lock file until it executes its program), and by a node in another
    /// process that is closing.
    package var writerLockWait: Duration = .milliseconds(250)
    /// Called once when `open` has waited a second for the writer lock.
    package var onWaitingForWriterLock: (@Sendable () -> Void)? = nil

    /// The default options: 60 000 ms drift, a 256 MiB initial map, the system
    /// clock, 16 MiB pictures and no wait for another process's writer lock.
    public init() {}
}

/// What became of one event given to `Node.ingest`.
public enum IngestResult: Hashable, Sendable {
    case accepted(EventID)
    case duplicate(EventID)
    case refused(EventError)
    /// Not stored because another event of an all-or-nothing batch is damaged.
    case withheld
    /// Valid, but the write failed (for example a full disk); nothing was acknowledged.
    case notStored(String)
}

/// What `Node.ingest` did with a batch: one ``IngestResult`` per input, and
/// counts of each outcome.
public struct IngestReport: Sendable {
    /// One result per input, in input order.
    public var results: [IngestResult]

    /// Wraps per-input results, which must be in input order.
    public init(results: [IngestResult]) { self.results = results }

    /// How many events were newly stored.
    public var accepted: Int { results.count { if case .accepted = $0 { true } else { false } } }
    /// How many events the store held already, including purged ones whose
    /// payload this batch put back.
    public var duplicates: Int { results.count { if case .duplicate = $0 { true } else { false } } }
    /// Everything not stored: refused, withheld or failed to write.
    public var refused: Int { results.count - accepted - duplicates }
    /// How many valid events were not stored because another event of an
    /// all-or-nothing batch is damaged (`ingestAllOrNothing`); also counted in ``refused``.
    public var withheld: Int { results.count { $0 == .withheld } }
    /// Every event that was refused or failed to write, with the reason.
    public var errors: [(index: Int, code: String, reason: String)] {
        results.enumerated().compactMap { i, r in
            switch r {
            case .refused(let e): (i, e.code, e.description)
            case .notStored(let why): (i, "not_stored", why)
            default: nil
            }
        }
    }
}

/// A Chorus node on one store: the embeddable library API (README,
/// "Embedding the library"). It signs this device's events, ingests remote ones and reads
/// the log. Writes go through one group-commit writer; reads are
/// `nonisolated` and run concurrently in LMDB read transactions.
public actor Node {
    /// The path of the store directory this node was created or opened at.
    public nonisolated let storePath: String
    /// The keys this node acts with: its user, its device and, for an issuer, its issuer key.
    public nonisolated let identity: Identity
    /// The store's log, blobs and projections, and its one commit (one value,
    /// built when the node opens; the writer commits through it).
    package nonisolated let store: Store
    /// The store's event log, for reading raw events and feeds. Write only through
    /// the node: the store has one writer (Specs/storage.md §5.1).
    package nonisolated let log: LogStore
    /// Profiles, pictures, relationships, chats, coins and slots: what the
    /// node's reads (`profile(of:)`, `balance(of:)`, …) answer from.
    package nonisolated let projections: Projections
    /// The store's content-addressed blobs: picture bytes and encrypted chat
    /// attachments, keyed by their BLAKE2b-256 hash.
    package nonisolated let blobs: BlobStore
    /// The store's network configuration (issuers, slot prices; `network.json`),
    /// which the projections apply (Specs/projections.md §1).
    public nonisolated var network: NetworkConfig { projections.config }
    /// The options this node was opened with.
    public nonisolated let options: NodeOptions
    /// Whether the node was opened read-only: it then holds no signing key, every
    /// write throws ``NodeError/readOnly`` and ingested events are refused.
    public nonisolated let isReadOnly: Bool

    private let deviceKey: SigningKey?
    let userKey: SigningKey?
    private let issuerKey: SigningKey?
    private let writer: GroupCommitWriter?
    nonisolated let writerNotifier: ArrivalNotifier
    /// This device's encryption key and the epoch keys it has unwrapped.
    nonisolated let keyRing: KeyRing
    private let signer: BatchSigner?
    private var lockFD: Int32
    private var clock: HybridClock
    /// Heads of the feeds this node signs, ahead of the store while appends
    /// are in flight (a key present with a nil value: the feed is empty).
    private var signingHeads: [PublicKey: FeedHead?] = [:]
    /// Bumped when a failed write forces a reload from the store, so the
    /// failures of events signed before it do not reload a second time.
    private var signingGeneration: [PublicKey: Int] = [:]

    // MARK: Opening

    /// Creates a new store with a fresh user key and device key, and appends
    /// the first event: the user key binding the device (`device.added`,
    /// carrying the device's consent).
    public static func create(
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

    /// Creates a store for another device of an existing user: only a
    /// device key is made here. The user binds it from a node holding the
    /// user key with `addDevice(_:proof:name:)`, using `bindingProof`.
    public static func createDevice(
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

    /// Opens an existing store. Read-write opening takes the store's writer
    /// lock, so two processes never write the same feeds at once.
    public static func open(at path: String, readOnly: Bool = false, options: NodeOptions = NodeOptions()) async throws
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
            let log = try LogStore(env: env)
            let configPath = path + "/" + NetworkConfig.fileName
            let network: NetworkConfig
            if FileManager.default.fileExists(atPath: configPath) {
                network = try NetworkConfig.load(from: configPath)
            } else {
                // A store from before network configurations: no issuers yet.
                network = NetworkConfig()
                if !readOnly { try network.write(to: configPath) }
            }
            let blobs = try BlobStore(env: env)
            let projections = try Projections(log: log, blobs: blobs, config: network)
            let store = Store(env: env, log: log, blobs: blobs, projections: projections)
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
    public static let storeFormat = LogStore.formatVersion

    /// Upgrades a store written by an older format to the current one
    /// (Specs/storage.md §4.1), keeping every event, blob and key; returns
    /// false when it is already current. Takes the writer lock, so it never
    /// runs beside a node that writes the store. The projections are folded
    /// again on the next read-write `open` (with its progress). Runs on a
    /// thread of its own and can be cancelled; an interrupted upgrade
    /// resumes where it stopped. `progress` counts the entries copied over
    /// every step the store needs.
    public static func upgrade(
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

    private init(
        path: String, store: Store, user: PublicKey, userKey: SigningKey?, device: SigningKey,
        issuer: SigningKey?, agreement: AgreementKey?, lockFD: Int32, readOnly: Bool, options: NodeOptions
    ) {
        self.keyRing = KeyRing(agreement: agreement)
        self.storePath = path
        self.store = store
        self.log = store.log
        self.projections = store.projections
        self.blobs = store.blobs
        self.options = options
        self.isReadOnly = readOnly
        self.identity = Identity(user: UserID(user), device: DeviceID(device.publicKey), issuer: issuer?.publicKey)
        self.userKey = readOnly ? nil : userKey
        self.deviceKey = readOnly ? nil : device
        self.issuerKey = readOnly ? nil : issuer
        self.lockFD = lockFD
        self.clock = HybridClock(last: (try? store.log.maxHLC()) ?? .zero)
        let writer =
            readOnly ? nil : GroupCommitWriter(
                store: store,
                driftMillis: options.driftMillis, nowMillis: options.clock)
        self.writer = writer
        self.writerNotifier = writer?.notifier ?? ArrivalNotifier()
        self.signer = writer.map(BatchSigner.init(writer:))
    }

    /// Finishes queued writes and releases the store. Idempotent.
    public func close() {
        signer?.close()
        writer?.close()
        writerNotifier.finishAll()
        // Every queued write is durable now; reads still in flight finish
        // first. Later calls fail with "the store is closed".
        log.env.close()
        if lockFD >= 0 {
            Foundation.close(lockFD)
            lockFD = -1
        }
    }

    deinit {
        signer?.close()
        writer?.close()
        if lockFD >= 0 { Foundation.close(lockFD) }
    }

    // MARK: Writing this node's own events

    /// Signs an event with this device's key, appends it to the device's
    /// feed and returns it once it is durable.
    @discardableResult
    package func append(_ kind: EventKind, object: ObjectID, payload: CBORValue, blobs: [[UInt8]] = []) async throws
        -> Event
    {
        guard let deviceKey else { throw NodeError.readOnly }
        return try await appendSigned(by: deviceKey, kind, object: object, payload: payload, blobs: blobs)
    }

    /// Appends an event of the kind its typed payload belongs to
    /// (Sources/ChorusEvents/Payloads.swift).
    @discardableResult
    package func append<P: KindPayload>(_ payload: P, object: ObjectID, blobs: [[UInt8]] = []) async throws -> Event {
        try await append(P.kind, object: object, payload: payload.cbor, blobs: blobs)
    }

    /// Signs an event of the payload's kind with the user key and returns it once
    /// durable. Throws ``NodeError/readOnly``, ``NodeError/noUserKey`` on a store
    /// without the user secret, or ``NodeError/ownEventRefused(_:)`` if the log refuses it.
    @discardableResult
    package func appendAsUser<P: KindPayload>(_ payload: P, object: ObjectID) async throws -> Event {
        try await appendAsUser(P.kind, object: object, payload: payload.cbor)
    }

    /// Signs an event of the payload's kind with this node's issuer key and returns
    /// it once durable. Throws ``NodeError/readOnly``, ``NodeError/noIssuerKey`` on a
    /// store without an issuer key, or ``NodeError/ownEventRefused(_:)``.
    @discardableResult
    package func appendAsIssuer<P: KindPayload>(_ payload: P, object: ObjectID) async throws -> Event {
        try await appendAsIssuer(P.kind, object: object, payload: payload.cbor)
    }

    /// Signs an event with the user key (device added or removed).
    @discardableResult
    package func appendAsUser(_ kind: EventKind, object: ObjectID, payload: CBORValue) async throws -> Event {
        guard !isReadOnly else { throw NodeError.readOnly }
        guard let userKey else { throw NodeError.noUserKey }
        return try await appendSigned(by: userKey, kind, object: object, payload: payload)
    }

    /// Signs an event with this node's issuer key (coin credits).
    @discardableResult
    package func appendAsIssuer(_ kind: EventKind, object: ObjectID, payload: CBORValue) async throws -> Event {
        guard !isReadOnly else { throw NodeError.readOnly }
        guard let issuerKey else { throw NodeError.noIssuerKey }
        return try await appendSigned(by: issuerKey, kind, object: object, payload: payload)
    }

    private func appendSigned(
        by key: SigningKey, _ kind: EventKind, object: ObjectID, payload: CBORValue, blobs: [[UInt8]] = []
    ) async throws -> Event {
        guard let signer else { throw NodeError.readOnly }
        let author = key.publicKey
        let head: FeedHead?
        if let cached = signingHeads[author] {
            head = cached
        } else {
            head = try log.head(of: author)
        }
        let generation = signingGeneration[author, default: 0]
        let hlc = clock.tick(nowMillis: options.clock())
        let unsigned = try UnsignedEvent(
            author: author, seq: (head?.seq ?? 0) + 1, prev: head?.id, hlc: hlc, kind: kind, object: object,
            payload: payload)
        // The next append chains to this one before it is signed or durable (pipelining).
        signingHeads[author] = .some(FeedHead(seq: unsigned.header.seq, id: unsigned.id, hlc: hlc))
        let event: Event
        let outcome: AppendOutcome
        do {
            // Enqueued synchronously, still on this actor: an async call
            // would hop off the actor first and let a later append overtake
            // this one.
            (event, outcome) = try await withCheckedThrowingContinuation { continuation in
                signer.enqueue(BatchSigner.Job(unsigned: unsigned, key: key, blobs: blobs) { continuation.resume(with: $0) })
            }
        } catch {
            forgetSigningHead(author, ifGeneration: generation)
            throw error
        }
        switch outcome {
        case .accepted, .duplicate, .refilled:
            return event
        case .refused(let reason):
            forgetSigningHead(author, ifGeneration: generation)
            throw NodeError.ownEventRefused(reason)
        }
    }

    /// Appends many events signed by one of this node's keys (an issuer
    /// crediting a day's receipts, an import of local data): headers are
    /// chained here in order, signed on all cores and committed in as few
    /// group commits as the writer's cap allows. Returns the events, in
    /// order, once every one is durable. If one is refused, the call throws
    /// and the events after it in the same feed are refused too (their
    /// chain is broken); those before it stay.
    @discardableResult
    package func appendBatch(_ items: [PendingEvent], signedBy signer: EventSigner = .device) async throws -> [Event] {
        guard !items.isEmpty else { return [] }
        guard let batchSigner = self.signer else { throw NodeError.readOnly }
        let key: SigningKey
        switch signer {
        case .device:
            guard let deviceKey else { throw NodeError.readOnly }
            key = deviceKey
        case .user:
            guard let userKey else { throw NodeError.noUserKey }
            key = userKey
        case .issuer:
            guard let issuerKey else { throw NodeError.noIssuerKey }
            key = issuerKey
        }
        let author = key.publicKey
        var head: FeedHead?
        if let cached = signingHeads[author] { head = cached } else { head = try log.head(of: author) }
        let generation = signingGeneration[author, default: 0]
        var unsigned: [UnsignedEvent] = []
        unsigned.reserveCapacity(items.count)
        do {
            for item in items {
                let hlc = clock.tick(nowMillis: options.clock())
                let u = try UnsignedEvent(
                    author: author, seq: (head?.seq ?? 0) + 1, prev: head?.id, hlc: hlc, kind: item.kind, object: item.object,
                    payload: item.payload)
                head = FeedHead(seq: u.header.seq, id: u.id, hlc: hlc)
                unsigned.append(u)
            }
        } catch {
            // Nothing was enqueued: the cached head is unchanged.
            throw error
        }
        signingHeads[author] = .some(head)
        let outcomes: [(Event, AppendOutcome)]
        do {
            outcomes = try await withCheckedThrowingContinuation { continuation in
                let results = BatchResults(count: unsigned.count) { continuation.resume(with: $0) }
                // Enqueued synchronously on this actor, so no other append interleaves.
                for (i, u) in unsigned.enumerated() {
                    batchSigner.enqueue(BatchSigner.Job(unsigned: u, key: key, blobs: items[i].blobs) { results.complete(i, $0) })
                }
            }
        } catch {
            forgetSigningHead(author, ifGeneration: generation)
            throw error
        }
        for (_, outcome) in outcomes {
            if case .refused(let reason) = outcome {
                forgetSigningHead(author, ifGeneration: generation)
                throw NodeError.ownEventRefused(reason)
            }
        }
        return outcomes.map(\.0)
    }

    /// Stores blob bytes received from a peer, in the writer's next group
    /// commit (one writer, Specs/storage.md §5.1), unless no live picture
    /// references them any more or they are stored already. The caller has
    /// checked the bytes against `hash`. Returns whether they were stored.
    package func storeReceivedBlob(_ bytes: [UInt8], hash: Hash32) async throws -> Bool {
        try await storeReceivedBlobs([(hash, bytes)]) == 1
    }

    /// Stores several received blobs in one group commit, each as
    /// `storeReceivedBlob` would; returns how many were stored. One durable
    /// commit for the blobs that arrived while the previous ones were being
    /// written, instead of one each (Specs/sync.md §4.4).
    package func storeReceivedBlobs(_ received: [(hash: Hash32, bytes: [UInt8])]) async throws -> Int {
        guard let writer else { throw NodeError.readOnly }
        guard !received.isEmpty else { return 0 }
        let stored = Mutex(0)
        let projections = self.projections
        let blobs = self.blobs
        let work: @Sendable (Transaction) throws -> Void = { txn in
            // The body may run again after the map grows: count from zero.
            var count = 0
            for (hash, bytes) in received {
                guard try projections.isBlobReferenced(hash, in: txn), try !blobs.contains(hash, in: txn) else { continue }
                try blobs.put(bytes, checkedAgainst: hash, in: txn)
                try projections.blobStored(hash, in: txn)
                count += 1
            }
            stored.withLock { $0 = count }
        }
        let _: [AppendOutcome] = try await withCheckedThrowingContinuation { continuation in
            writer.enqueue([], work: work) { continuation.resume(with: $0) }
        }
        return stored.withLock { $0 }
    }

    /// Queues `work` on the writer behind everything already queued, without
    /// waiting: it commits with or after the events queued before it, never
    /// before them (peer bookkeeping that records what a session received).
    /// `completion` gets the error that stopped it, or nil once durable.
    package nonisolated func enqueueWrite(
        _ work: @escaping @Sendable (Transaction) throws -> Void, completion: @escaping @Sendable ((any Error)?) -> Void
    ) {
        guard let writer else { return completion(NodeError.readOnly) }
        writer.enqueue([], work: work) { result in
            if case .failure(let error) = result { completion(error) } else { completion(nil) }
        }
    }

    /// Folds the projections again from the log (Specs/storage.md §5) on the
    /// writer's thread: writes queued meanwhile wait and commit after it.
    /// Readers may see the projections partly folded until it returns.
    public func rebuildProjections(progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil) async throws {
        guard let writer else { throw NodeError.readOnly }
        let store = self.store
        let _: [AppendOutcome] = try await withCheckedThrowingContinuation { continuation in
            writer.exclusively({ try store.rebuild(progress: progress) }) { continuation.resume(with: $0) }
        }
    }

    /// Drops the cached head so the next append reloads it from the store.
    private func forgetSigningHead(_ author: PublicKey, ifGeneration generation: Int? = nil) {
        let current = signingGeneration[author, default: 0]
        if let generation, generation != current { return }
        signingGeneration[author] = current + 1
        signingHeads.removeValue(forKey: author)
    }

    // MARK: Ingesting remote events

    /// The one path by which events from elsewhere enter the store.
    /// Envelopes are decoded on all cores, put in feed order (so a batch
    /// behaves as a set), verified on all cores but for those already held
    /// (Specs/events.md §7.4), and go to the group-commit writer.
    /// Returns one result per input, in input order. `enqueued` and `last`
    /// are as for `ingest(events:last:enqueued:)`; a last call is verified
    /// slice by slice as it is handed to the writer.
    public func ingest(_ envelopes: [[UInt8]], last: Bool = false, enqueued: @escaping @Sendable () -> Void = {}) async
        -> IngestReport
    {
        // Verified after decoding, not with it: events already held are not verified again.
        await ingest(
            decoded: await Self.parallel(envelopes, Self.decodeOnly), gather: last ? Self.lastCallGather(envelopes.count) : Self.commitGather,
            enqueued: enqueued)
    }

    /// Like `ingest(_:)`, but refuses the whole batch, storing nothing, if any
    /// event in it is damaged in itself (encoding, hash, schema, signature).
    /// Import of a file uses this: a damaged file is not half-imported.
    package func ingestAllOrNothing(_ envelopes: [[UInt8]]) async -> IngestReport {
        let decoded = await Self.parallel(envelopes, ParallelVerifier.check)
        if decoded.contains(where: { if case .failure = $0 { true } else { false } }) {
            return IngestReport(results: decoded.map { r in
                switch r {
                case .failure(let e): .refused(e)
                case .success: .withheld
                }
            })
        }
        return await ingest(decoded: decoded, verified: true)
    }

    /// Decodes and verifies envelopes on all cores without storing anything
    /// (Specs/events.md §7.1): nil for a well-formed event, else its error.
    package static func check(_ envelopes: [[UInt8]]) async -> [EventError?] {
        await parallel(envelopes, ParallelVerifier.check).map { r in
            if case .failure(let e) = r { e } else { nil }
        }
    }

    /// Ingests events already decoded (their signatures are still verified).
    ///
    /// `enqueued` is called once every event of the call has been verified
    /// and queued for the writer, before they are durable: a caller that
    /// streams batches (a sync receiving frames) may then start the next
    /// call, whose verification overlaps this call's commit and whose
    /// events queue behind these, in order.
    ///
    /// `last`: no call is expected to follow soon (a sync's last requested
    /// events). The events are then handed to the writer in parts as they
    /// are verified (`lastCallGather`), so commits overlap the verification
    /// of the rest and what is written after the last verification is one
    /// part, not the whole call. Otherwise the call goes as whole
    /// transactions (`commitGather`), which write fewer pages.
    ///
    /// `after`: the events go to the writer only once it has finished (an
    /// earlier call's `enqueued`), so a caller may start this call's
    /// verification while the earlier call's is still running, and the
    /// cores never wait between the two, yet the writer gets them in order.
    package func ingest(
        events: [Event], last: Bool = false, after: Task<Void, Never>? = nil, enqueued: @escaping @Sendable () -> Void = {}
    ) async -> IngestReport {
        await ingest(
            decoded: events.map { .success($0) }, gather: last ? Self.lastCallGather(events.count) : Self.commitGather,
            after: after, enqueued: enqueued)
    }

    /// The events of a last call handed to the writer at once: a quarter.
    static func lastCallGather(_ count: Int) -> Int { min(commitGather, max(verifySlice, (count + 3) / 4)) }

    static let verifySlice = 2048
    /// Verified events gathered before they are queued for the writer: its
    /// whole transaction cap, so a sync batch commits as one transaction
    /// (Specs/storage.md §5.1 step 2 weighs the pages saved against the
    /// freed pages the file keeps).
    static let commitGather = GroupCommitWriter.maxEventsPerTransaction

    private func ingest(
        decoded: consuming [Result<Event, EventError>], verified: Bool = false, gather: Int = commitGather,
        after: Task<Void, Never>? = nil, enqueued: @escaping @Sendable () -> Void = {}
    ) async -> IngestReport {
        var after = after
        var results = [IngestResult](repeating: .withheld, count: decoded.count)
        // Events are large values (three arrays and a header): the batch is
        // put in feed order by sort keys of plain values, then held once in
        // that order, and everything after works by position, not by copies.
        var keys: [(first: Bool, author: PublicKey, seq: UInt64, index: Int)] = []
        keys.reserveCapacity(decoded.count)
        var binders = Set<PublicKey>()
        for i in decoded.indices {
            if let e = decoded[i].orderKey {
                keys.append((false, e.author, e.seq, i))
                if e.kind == .deviceAdded || e.kind == .deviceRemoved { binders.insert(e.author) }
            } else if case .failure(let e) = decoded[i] {
                results[i] = .refused(e)
            }
        }
        // Feeds that bind or remove devices go first: their devices' events
        // in the same batch are then folded once, for the right user,
        // instead of being folded and then re-folded when the binding lands.
        if !binders.isEmpty {
            for k in keys.indices where binders.contains(keys[k].author) { keys[k].first = true }
        }
        keys.sort { a, b in
            a.first != b.first ? a.first
                : a.author != b.author ? a.author < b.author : a.seq != b.seq ? a.seq < b.seq : a.index < b.index
        }
        let order = keys.map(\.index)
        // Moved out of `decoded`, not copied: a copy retains each of the
        // event's buffers, which other cores wrote (a cache miss each).
        var ordered: [Event] = []
        ordered.reserveCapacity(order.count)
        decoded.withUnsafeMutableBufferPointer { slots in
            guard let base = slots.baseAddress else { return }
            for i in order {
                guard case .success(let e) = (base + i).move() else { preconditionFailure("only decoded events are ordered") }
                ordered.append(e)
                (base + i).initialize(to: .failure(.badSignature))  // any value: the slot is no longer read
            }
        }
        let events = ordered
        guard let writer else {
            for i in order { results[i] = .refused(.malformedEnvelope("store is read-only")) }
            NodeMetrics.record(results)
            enqueued()
            return IngestReport(results: results)
        }
        let (written, sink) = AsyncStream.makeStream(of: (slice: Int, result: Result<[AppendOutcome], any Error>).self)
        // Positions in `events` of each request handed to the writer.
        var slices: [[Int]] = []
        var good: [Int] = []
        // A call that goes to the writer whole is verified in one pass:
        // slices would only add a wait for the slowest core at each end.
        let slice = events.count <= gather ? max(1, events.count) : Self.verifySlice
        var start = 0
        while start < events.count {
            let range = start..<min(events.count, start + slice)
            start = range.upperBound
            let checks: [Bool]
            if verified {
                checks = Array(repeating: true, count: range.count)
            } else {
                // Events already held are not verified again: peers that
                // serve the same feeds (a user's two home relays) send the
                // same events, and the writer answers them `duplicate`.
                let positions = Array(range)
                var ok =
                    (try? log.held(
                        positions.lazy.map {
                            let e = events[$0]
                            return (e.header.author, e.header.seq, e.id, e.payloadBytes != nil && e.kind.payloadIsPurgeable)
                        }))
                    ?? Array(repeating: false, count: positions.count)
                let toVerify = positions.indices.filter { !ok[$0] }
                let verifiedNow = await Self.parallel(toVerify.map { positions[$0] }) { k in
                    events.withUnsafeBufferPointer { $0[k].verifySignature() }
                }
                for (offset, good) in zip(toVerify, verifiedNow) { ok[offset] = good }
                checks = ok
            }
            for (k, ok) in zip(range, checks) {
                if ok { good.append(k) } else { results[order[k]] = .refused(.badSignature) }
            }
            // Verified events are handed to the writer in requests of up to
            // `commitGather`, not slice by slice: in a large store a commit
            // costs mostly the pages its scattered writes touch, about as
            // many for 2,048 events as for 30,000, and a writer fed slice by
            // slice commits each slice alone (Specs/storage.md §5.1).
            if good.count >= gather || start >= events.count {
                let number = slices.count
                slices.append(good)
                // A whole call's events go as the array itself, not copied.
                let request = good.count == events.count ? events : good.map { events[$0] }
                if let earlier = after {
                    await earlier.value
                    after = nil
                }
                writer.enqueue(request) { sink.yield((number, $0)) }
                good = []
            }
        }
        enqueued()
        // Not finished here: yields after `finish()` would be dropped. The
        // loop ends when every slice has reported.
        var remaining = slices.count
        if remaining > 0 {
            for await (number, outcome) in written {
                remaining -= 1
                let slice = slices[number]
                switch outcome {
                case .success(let outcomes):
                    for (k, o) in zip(slice, outcomes) {
                        switch o {
                        case .accepted:
                            results[order[k]] = .accepted(events[k].id)
                            let header = events[k].header
                            clock.observe(header.hlc)
                            if signingHeads[header.author] != nil { forgetSigningHead(header.author) }
                        case .duplicate, .refilled: results[order[k]] = .duplicate(events[k].id)
                        case .refused(let e): results[order[k]] = .refused(e)
                        }
                    }
                case .failure(let error):
                    for k in slice { results[order[k]] = .notStored("\(error)") }
                }
                if remaining == 0 { break }
            }
        }
        sink.finish()
        NodeMetrics.record(results)
        return IngestReport(results: results)
    }

    /// Maps `items` on all cores, off the Swift concurrency pool (the work
    /// is CPU-bound and synchronous).
    static func parallel<In: Sendable, Out: Sendable>(_ items: [In], _ transform: @escaping @Sendable (In) -> Out) async
        -> [Out]
    {
        guard !items.isEmpty else { return [] }
        return await offThePool { parallelMap(items, transform) }
    }

    @Sendable static func decodeOnly(_ envelope: [UInt8]) -> Result<Event, EventError> {
        do { return .success(try Event.decode(envelope)) } catch { return .failure(error) }
    }

    // MARK: Reading

    /// The head of `author`'s feed as stored (sequence number, id and HLC of its
    /// last event), or `nil` if this node holds none of its events. Throws if the store cannot be read.
    package nonisolated func head(of author: PublicKey) throws -> FeedHead? { try log.head(of: author) }
    /// The head of every feed this node holds, ordered by author key: what sync
    /// announces to peers. Throws if the store cannot be read.
    package nonisolated func heads() throws -> [(author: PublicKey, head: FeedHead)] { try log.allHeads() }
    /// The stored event with this id and its local arrival position, or `nil` if
    /// this node does not hold it. A purged event comes without its payload.
    package nonisolated func event(_ id: EventID) throws -> StoredEvent? { try log.event(id) }
    /// Up to `limit` events of `author`'s feed from sequence number `fromSeq`, in
    /// sequence order. Throws if the store cannot be read.
    package nonisolated func feed(_ author: PublicKey, fromSeq: UInt64 = 1, limit: Int = .max) throws -> [StoredEvent] {
        try log.feed(author, fromSeq: fromSeq, limit: limit)
    }
    /// Events that arrived after local position `since`, in arrival order.
    package nonisolated func arrivals(since: UInt64 = 0, limit: Int = .max) throws -> [StoredEvent] {
        try log.arrivals(since: since, limit: limit)
    }
    /// The local arrival position of the newest stored event (0 for an empty log);
    /// pass it later to ``arrivals(since:limit:)`` to read only what came after.
    package nonisolated func lastArrival() throws -> UInt64 { try log.lastArrival() }
    /// A feed's stored envelopes from `fromSeq` as bytes, for serving.
    package nonisolated func feedEnvelopes(_ author: PublicKey, fromSeq: UInt64, limit: Int) throws -> [(seq: UInt64, envelope: [UInt8])] {
        try log.feedEnvelopes(author, fromSeq: fromSeq, limit: limit)
    }
    /// Evidence of every forked feed this node has seen: for an author and
    /// sequence number, the event kept and the conflicting one refused.
    package nonisolated func forks() throws -> [ForkEvidence] { try log.forkEvidence() }

    /// Group-commit statistics of this node's writer.
    package nonisolated var writerStatistics: WriterStatistics {
        writer?.statistics ?? WriterStatistics()
    }

    /// Returns once this node's writer has run an empty job after every
    /// write queued before it: the writer commits. Throws
    /// ``NodeError/readOnly`` on a read-only node and `StorageError.closed`
    /// after `close()`. A writer that is stuck (a full disk, a stalled
    /// device) makes this wait; callers bound the wait.
    package nonisolated func probeWriter() async throws {
        guard let writer else { throw NodeError.readOnly }
        let _: [AppendOutcome] = try await withCheckedThrowingContinuation { continuation in
            writer.exclusively({}, completion: { continuation.resume(with: $0) })
        }
    }

    /// Seconds this node's store has spent writing and flushing committed
    /// pages (`mdb_txn_commit`).
    package nonisolated var secondsInDurableCommits: Double { log.env.secondsInDurableCommits }
}

enum ParallelVerifier {
    @Sendable static func check(_ envelope: [UInt8]) -> Result<Event, EventError> {
        Node.decodeOnly(envelope).flatMap { $0.verifySignature() ? .success($0) : .failure(.badSignature) }
    }
}


/// Which of this node's keys signs a batch (`Node.appendBatch`).
package enum EventSigner: Sendable {
    case device, user, issuer
}

/// One event of a batch to append: built from a typed payload.
package struct PendingEvent: Sendable {
    /// The event kind, taken from the payload's type.
    package let kind: EventKind
    /// The id of the thing the event is about (Specs/events.md §6).
    package let object: ObjectID
    /// The payload as CBOR; it is checked against the kind's schema by `Node.appendBatch`.
    package let payload: CBORValue
    /// Blob bytes stored in the same commit as the event (for example a picture's bytes).
    package let blobs: [[UInt8]]

    /// Prepares an event of `P`'s kind about `object`, with any blob bytes that
    /// must become durable together with it.
    package init<P: KindPayload>(_ payload: P, object: ObjectID, blobs: [[UInt8]] = []) {
        self.kind = P.kind
        self.object = object
        self.payload = payload.cbor
        self.blobs = blobs
    }
}

/// Collects the per-event results of a batch and reports once all are in.
final class BatchResults: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [Result<(Event, AppendOutcome), any Error>?]
    private var remaining: Int
    private let onDone: @Sendable (Result<[(Event, AppendOutcome)], any Error>) -> Void

    init(count: Int, onDone: @escaping @Sendable (Result<[(Event, AppendOutcome)], any Error>) -> Void) {
        results = Array(repeating: nil, count: count)
        remaining = count
        self.onDone = onDone
    }

    func complete(_ index: Int, _ result: Result<(Event, AppendOutcome), any Error>) {
        lock.lock()
        results[index] = result
        remaining -= 1
        let done = remaining == 0
        let all = results
        lock.unlock()
        guard done else { return }
        let callback = onDone
        var out: [(Event, AppendOutcome)] = []
        for r in all {
            switch r {
            case .success(let pair)?: out.append(pair)
            case .failure(let error)?: return callback(.failure(error))
            case nil: return callback(.failure(StorageError.closed))
            }
        }
        callback(.success(out))
    }
}

/// Runs long synchronous work on a thread of its own, so it does not hold
/// one of the cooperative pool's threads; cancelling the calling task sets
/// the flag `body` polls.
func runOnOwnThread<T: Sendable>(
    _ name: String, _ body: @escaping @Sendable (_ cancelled: @escaping @Sendable () -> Bool) throws -> T
) async throws -> T {
    let flag = CancelFlag()
    // Released on the thread before the caller resumes (`HandOff`).
    let work = HandOff { try body { flag.value.load(ordering: .relaxed) } }
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let thread = Thread {
                continuation.resume(with: work.run())
            }
            thread.name = name
            thread.start()
        }
    } onCancel: {
        flag.value.store(true, ordering: .relaxed)
    }
}

/// A flag set from a task's cancellation handler and polled by a thread.
final class CancelFlag: Sendable {
    let value = Atomic<Bool>(false)
}

extension Result where Success == Event {
    /// What a batch is put in feed order by, read where the event is: a
    /// `switch` binding the event copies it (a retain of each of its
    /// buffers, which other cores wrote) only to read three fields. Not
    /// inlined, so the caller's element stays borrowed.
    @inline(never)
    fileprivate var orderKey: (author: PublicKey, seq: UInt64, kind: EventKind)? {
        guard case .success(let e) = self else { return nil }
        return (e.author, e.seq, e.kind)
    }
}
