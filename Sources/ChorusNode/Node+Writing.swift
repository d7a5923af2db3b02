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

/// This node's own events: signed, chained and handed to the one writer,
/// returned once durable (Specs/storage.md §5.1); received blobs and the
/// projection rebuild go through the same writer.
extension Node {
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
            throw NodeError.ownEventRefused(reason.description)
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
                throw NodeError.ownEventRefused(reason.description)
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

    /// Runs `work` in a write transaction on the writer, behind what is
    /// queued there, and returns its result once the transaction is durable:
    /// how bookkeeping beside the log (inboxes, routing memory) writes, so
    /// that the store has one writer (Specs/storage.md §5).
    package nonisolated func write<T: Sendable>(_ work: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        let result = Mutex<T?>(nil)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            enqueueWrite({ txn in
                let value = try work(txn)
                result.withLock { $0 = value }
            }) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
        guard let value = result.withLock({ $0 }) else { throw StorageError.closed }
        return value
    }

    /// Folds the projections again from the log (Specs/storage.md §5) on the
    /// writer's thread: writes queued meanwhile wait and commit after it.
    /// Readers may see the projections partly folded until it returns.
    package func rebuildProjections(progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil) async throws {
        guard let writer else { throw NodeError.readOnly }
        let store = self.store
        let _: [AppendOutcome] = try await withCheckedThrowingContinuation { continuation in
            writer.exclusively({ try store.rebuild(progress: progress) }) { continuation.resume(with: $0) }
        }
    }

    /// Drops the cached head so the next append reloads it from the store.
    func forgetSigningHead(_ author: PublicKey, ifGeneration generation: Int? = nil) {
        let current = signingGeneration[author, default: 0]
        if let generation, generation != current { return }
        signingGeneration[author] = current + 1
        signingHeads.removeValue(forKey: author)
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
