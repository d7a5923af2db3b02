import ChorusCrypto
import ChorusEvents
import Synchronization

/// Signature checks shared between concurrent ingests. A node that syncs
/// with several relays at once receives the same events from each (a user's
/// feeds are listed on two relays, and both serve them); an event already in
/// the store is not verified again, but one that is being verified, or waits
/// for the writer, in another ingest would be. An ingest therefore claims the
/// events it is about to verify: an event another ingest claimed is not
/// verified twice, its result is awaited instead. A claim is named by the
/// event's id and its signature (Specs/events.md §5), so an event is taken as
/// verified only when exactly these signed bytes were; a claim lasts until the
/// claimer's write of the event is answered, after which the store holds it.
final class VerificationClaims: Sendable {
    struct Key: Hashable, Sendable {
        let id: EventID
        let signature: [UInt8]

        init(_ event: Event) {
            id = event.id
            signature = event.signature
        }

        // The id alone spreads keys: it is a hash of the signed header. Every
        // lookup under the claims' lock hashes its key, and an `[UInt8]`
        // hashes a byte at a time (64 combines for a signature, against 4
        // for the id's words); equality still compares the signature.
        func hash(into hasher: inout Hasher) { hasher.combine(id) }
    }

    /// What an ingest must do for each event it offered.
    enum Claim {
        /// Verify it, then `settle` it.
        case mine
        /// Another ingest verified it: its result.
        case settled(Bool)
        /// Another ingest is verifying it: await `results(of:)`.
        case pending
    }

    /// Several keys awaited together: resumed once all are settled.
    private final class Waiter: @unchecked Sendable {
        // Read and written only under the claims' lock.
        var remaining: Int
        var results: [Key: Bool] = [:]
        var continuation: CheckedContinuation<[Key: Bool], Never>?

        init(remaining: Int) { self.remaining = remaining }
    }

    private struct Entry {
        var verified: Bool?
        var waiters: [Waiter] = []
    }

    private let claims = Mutex<[Key: Entry]>([:])

    /// Claims every key no one has claimed; says for each what to do.
    func claim(_ keys: [Key]) -> [Claim] {
        claims.withLock { claims in
            keys.map { key in
                if let entry = claims[key] { return entry.verified.map(Claim.settled) ?? .pending }
                claims[key] = Entry()
                return .mine
            }
        }
    }

    /// Records the results of the claimer's checks and wakes whoever
    /// awaits them. A failed check is released at once (there is no write
    /// to wait for: the same bytes fail anywhere).
    func settle(_ keys: [Key], _ verified: [Bool]) {
        let ready: [(CheckedContinuation<[Key: Bool], Never>, [Key: Bool])] = claims.withLock { claims in
            var ready: [(CheckedContinuation<[Key: Bool], Never>, [Key: Bool])] = []
            for (key, ok) in zip(keys, verified) {
                guard var entry = claims[key] else { continue }
                for waiter in entry.waiters {
                    waiter.results[key] = ok
                    waiter.remaining -= 1
                    if waiter.remaining == 0, let continuation = waiter.continuation {
                        waiter.continuation = nil
                        ready.append((continuation, waiter.results))
                    }
                }
                entry.waiters = []
                entry.verified = ok
                claims[key] = ok ? entry : nil
            }
            return ready
        }
        for (continuation, results) in ready { continuation.resume(returning: results) }
    }

    /// Ends the claims of an ingest whose write was answered (or failed):
    /// from now on the store answers for the events it holds. Whoever still
    /// awaits a key released unsettled gets no result for it, and checks it
    /// itself.
    func release(_ keys: some Sequence<Key>) {
        let ready: [(CheckedContinuation<[Key: Bool], Never>, [Key: Bool])] = claims.withLock { claims in
            var ready: [(CheckedContinuation<[Key: Bool], Never>, [Key: Bool])] = []
            for key in keys {
                guard let entry = claims.removeValue(forKey: key) else { continue }
                for waiter in entry.waiters {
                    waiter.remaining -= 1
                    if waiter.remaining == 0, let continuation = waiter.continuation {
                        waiter.continuation = nil
                        ready.append((continuation, waiter.results))
                    }
                }
            }
            return ready
        }
        for (continuation, results) in ready { continuation.resume(returning: results) }
    }

    /// The results of keys another ingest claimed, once each is settled or
    /// released: a key without a result (released unsettled, or before this
    /// call) is for the caller to check itself.
    func results(of keys: [Key]) async -> [Key: Bool] {
        guard !keys.isEmpty else { return [:] }
        return await withCheckedContinuation { continuation in
            let immediate: [Key: Bool]? = claims.withLock { claims in
                let waiter = Waiter(remaining: 0)
                for key in keys {
                    if let verified = claims[key]?.verified {
                        waiter.results[key] = verified
                    } else if claims[key] != nil {
                        claims[key]?.waiters.append(waiter)
                        waiter.remaining += 1
                    }
                }
                if waiter.remaining == 0 { return waiter.results }
                waiter.continuation = continuation
                return nil
            }
            if let immediate { continuation.resume(returning: immediate) }
        }
    }
}
