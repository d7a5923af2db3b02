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

/// What became of one event given to `Node.ingest`.
package enum IngestResult: Hashable, Sendable {
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
package struct IngestReport: Sendable {
    /// One result per input, in input order.
    package var results: [IngestResult]

    /// Wraps per-input results, which must be in input order.
    package init(results: [IngestResult]) { self.results = results }

    /// How many events were newly stored.
    package var accepted: Int { results.count { if case .accepted = $0 { true } else { false } } }
    /// How many events the store held already, including purged ones whose
    /// payload this batch put back.
    package var duplicates: Int { results.count { if case .duplicate = $0 { true } else { false } } }
    /// Everything not stored: refused, withheld or failed to write.
    package var refused: Int { results.count - accepted - duplicates }
    /// How many valid events were not stored because another event of an
    /// all-or-nothing batch is damaged (`ingestAllOrNothing`); also counted in ``refused``.
    package var withheld: Int { results.count { $0 == .withheld } }
    /// Every event that was refused or failed to write, with the reason.
    package var errors: [(index: Int, code: String, reason: String)] {
        results.enumerated().compactMap { i, r in
            switch r {
            case .refused(let e): (i, e.code, e.description)
            case .notStored(let why): (i, "not_stored", why)
            default: nil
            }
        }
    }
}

/// Events from elsewhere: decoded and verified on all cores, put in feed
/// order, and committed by the writer (Specs/events.md §7).
extension Node {
    /// The one path by which events from elsewhere enter the store.
    /// Envelopes are decoded on all cores, put in feed order (so a batch
    /// behaves as a set), verified on all cores but for those already held
    /// (Specs/events.md §7.4), and go to the group-commit writer.
    /// Returns one result per input, in input order. `enqueued` and `last`
    /// are as for `ingest(events:last:enqueued:)`; a last call is verified
    /// slice by slice as it is handed to the writer.
    package func ingest(_ envelopes: [[UInt8]], last: Bool = false, enqueued: @escaping @Sendable () -> Void = {}) async
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
        // The events this call claimed to check (`VerificationClaims`),
        // released once the writer has answered for them.
        var claimed: [VerificationClaims.Key] = []
        defer { verificationClaims.release(claimed) }
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
                let (ok, mine) = await checkSignatures(at: Array(range), of: events)
                claimed += mine
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

    /// Which of `events[positions]` have a valid signature, verified on all
    /// cores, and the claims taken to verify them (`VerificationClaims`),
    /// for the caller to release once the writer has answered for them.
    /// Events already held are not verified again: peers that serve the
    /// same feeds (a user's two home relays) send the same events, and the
    /// writer answers them `duplicate`. Nor are events another ingest is
    /// verifying, or verified and queued: their results are taken.
    private func checkSignatures(at positions: [Int], of events: [Event]) async -> (ok: [Bool], claimed: [VerificationClaims.Key]) {
        func held(_ offsets: [Int]) -> [Bool] {
            guard !offsets.isEmpty else { return [] }
            return (try? log.held(
                offsets.lazy.map {
                    let e = events[positions[$0]]
                    return (e.header.author, e.header.seq, e.id, e.payloadBytes != nil && e.kind.payloadIsPurgeable)
                })) ?? Array(repeating: false, count: offsets.count)
        }
        func verify(_ offsets: [Int]) async -> [Bool] {
            await Self.parallel(offsets.map { positions[$0] }) { k in events.withUnsafeBufferPointer { $0[k].verifySignature() } }
        }
        /// `offsets` without those the store holds now (marked good).
        func notHeld(_ offsets: [Int], ok: inout [Bool]) -> [Int] {
            zip(offsets, held(offsets)).compactMap { offset, held in
                if held { ok[offset] = true }
                return held ? nil : offset
            }
        }
        var ok = held(Array(positions.indices))
        let candidates = positions.indices.filter { !ok[$0] }
        let keys = candidates.map { VerificationClaims.Key(events[positions[$0]]) }
        var mine: [(offset: Int, key: VerificationClaims.Key)] = []
        var theirs: [(offset: Int, key: VerificationClaims.Key)] = []
        for ((offset, key), claim) in zip(zip(candidates, keys), verificationClaims.claim(keys)) {
            switch claim {
            case .mine: mine.append((offset, key))
            case .settled(let verified): ok[offset] = verified
            case .pending: theirs.append((offset, key))
            }
        }
        // An ingest may have written and released one between the first
        // look and the claim: the store answers for it now.
        let toVerify = notHeld(mine.map(\.offset), ok: &ok)
        for (offset, good) in zip(toVerify, await verify(toVerify)) { ok[offset] = good }
        verificationClaims.settle(mine.map(\.key), mine.map { ok[$0.offset] })
        // Theirs: awaited after ours are settled, so two ingests waiting on
        // each other's claims both go on. One released without a result
        // (written and released before this call looked, most likely) is
        // the store's to answer, else checked here.
        let answered = await verificationClaims.results(of: theirs.map(\.key))
        for (offset, key) in theirs { if let verified = answered[key] { ok[offset] = verified } }
        let unsettled = notHeld(theirs.filter { answered[$0.key] == nil }.map(\.offset), ok: &ok)
        for (offset, good) in zip(unsettled, await verify(unsettled)) { ok[offset] = good }
        let checked = toVerify.count + unsettled.count
        if checked > 0 {
            signatureChecks.add(checked, ordering: .relaxed)
            NodeMetrics.signaturesChecked.increment(by: checked)
        }
        let shared = candidates.count - mine.count - theirs.count + answered.count
        if shared > 0 { NodeMetrics.signaturesShared.increment(by: shared) }
        return (ok, mine.map(\.key))
    }

    /// Maps `items` on all cores, off the Swift concurrency pool (the work
    /// is CPU-bound and synchronous).
    static func parallel<In: Sendable, Out: Sendable>(_ items: [In], _ transform: @escaping @Sendable (In) -> Out) async
        -> [Out]
    {
        guard !items.isEmpty else { return [] }
        return await offThePool { parallelMap(items, transform) }
    }

    /// Decodes received envelopes (Specs/events.md §3): a few in line, many
    /// on all cores off the caller's thread (a sync session's actor keeps
    /// serving while a frame of thousands decodes).
    package static func decode(_ envelopes: [[UInt8]]) async -> [Result<Event, EventError>] {
        envelopes.count <= 32 ? envelopes.map(decodeOnly) : await parallel(envelopes, decodeOnly)
    }

    @Sendable static func decodeOnly(_ envelope: [UInt8]) -> Result<Event, EventError> {
        do { return .success(try Event.decode(envelope)) } catch { return .failure(error) }
    }

}

enum ParallelVerifier {
    @Sendable static func check(_ envelope: [UInt8]) -> Result<Event, EventError> {
        Node.decodeOnly(envelope).flatMap { $0.verifySignature() ? .success($0) : .failure(.badSignature) }
    }
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
