import ChorusBlobs
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusParallel
import Foundation

/// Answering the peer's requests: event ranges, payloads and blobs, within
/// the window of unacknowledged data frames (Specs/sync.md §4.3–4.4, §5).
extension SyncSession {
    // MARK: Serving

    func serveLoop() async throws {
        for await job in serveStream {
            switch job {
            case .ranges(let ranges), .push(let ranges):
                serving.served(ranges.count)
                var unfinished: [PublicKey] = []
                for r in ranges {
                    // Past the budget the rest goes unanswered: the peer's
                    // round ends incomplete and it asks again next session.
                    if serving.budgetSpent {
                        unfinished.append(r.author)
                        continue
                    }
                    if let prev = r.prev {
                        let before = try node.feed(r.author, fromSeq: r.from - 1, limit: 1).first
                        if let before, before.event.seq == r.from - 1, before.event.id != prev {
                            try await addToBatch(before.event)  // fork evidence instead of the range
                            continue
                        }
                    }
                    var next = r.from
                    while next <= r.to, !serving.budgetSpent {
                        // Served as stored: no decoding and re-encoding.
                        let page = try node.feedEnvelopes(r.author, fromSeq: next, limit: min(512, Int(min(r.to - next + 1, 512)), serving.eventsLeft))
                        guard let last = page.last else { break }
                        if ownFeeds.contains(r.author), !report.sentDeviceKeys {
                            // Its own device key or binding lets the peer wrap chat keys to this device
                            // (Specs/encryption.md §6 rule 5), which the next session then brings.
                            report.sentDeviceKeys = page.contains { s in
                                guard let kind = try? Event.decode(s.envelope).kind else { return false }
                                return kind == .deviceKey || kind == .deviceAdded
                            }
                        }
                        for s in page { try await addToBatch(envelope: s.envelope) }
                        next = last.seq + 1
                    }
                    if next > r.from { peerHeads.note(r.author, holds: next - 1) }
                    if next <= r.to { unfinished.append(r.author) }
                }
                // A push cut short announces the rest, so the peer asks for
                // it and sees its round incomplete (Specs/sync.md §4.2.2).
                if case .push = job, !unfinished.isEmpty {
                    let heads = try heads(of: unfinished)
                    try await flushBatch()
                    for chunk in heads.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
                }
            case .eventsEnd, .pushEnd:
                serving.served(1)
                try await flushBatch()
                send(.eventsEnd)
            case .payloads(let ids):
                serving.served(ids.count)
                for id in ids where !serving.budgetSpent {
                    if let stored = try node.event(id), stored.event.payloadBytes != nil { try await addToBatch(stored.event) }
                }
            case .payloadEnd:
                serving.served(1)
                try await flushBatch()
                send(.eventsEnd)
            case .blobs(let hashes):
                serving.served(hashes.count)
                try await flushBatch()
                for hash in hashes {
                    guard let bytes = try servableBlob(hash) else {
                        try await acquireCredit(for: .blob)
                        send(.blobMissing(hash))
                        continue
                    }
                    var offset = 0
                    while offset < bytes.count {
                        let end = min(bytes.count, offset + SyncLimits.blobChunkBytes)
                        try await acquireCredit(for: .blob)
                        send(.blobData(hash: hash, offset: UInt64(offset), total: UInt64(bytes.count), bytes: Array(bytes[offset..<end])))
                        offset = end
                    }
                    report.blobsSent += 1
                }
            case .blobEnd:
                serving.served(1)
                send(.blobEnd)
            }
        }
    }

    /// The bytes of a blob to serve, or nil to answer `blobMissing`: not
    /// held, not referenced by a live picture, or damaged. A damaged blob
    /// (bytes that no longer match their hash on this disk) is reported, not
    /// served and not a reason to end the session: every session with this
    /// node would end the same way until the blob is fetched again.
    func servableBlob(_ hash: Hash32) throws -> [UInt8]? {
        do {
            return try blobs.servable(hash)
        } catch BlobError.damaged {
            report.damagedBlobs.append(hash)
            return nil
        }
    }

    /// `ranges` with the feeds of keys that bind devices first, each group
    /// in the order requested (Specs/sync.md §4.3): a receiver then folds a
    /// device's events for its user once, instead of deciding them without
    /// the binding and again when it arrives.
    func bindersFirst(_ ranges: [FeedRange]) throws -> [FeedRange] {
        let binders = try node.projections.bindingDevices(among: ranges.lazy.map(\.author))
        guard !binders.isEmpty else { return ranges }
        return ranges.filter { binders.contains($0.author) } + ranges.filter { !binders.contains($0.author) }
    }

    func flushBatch() async throws {
        guard let frame = serving.flush() else { return }
        try await sendEvents(frame)
    }

    func addToBatch(_ event: Event) async throws { try await addToBatch(envelope: event.encoded()) }

    func addToBatch(envelope bytes: [UInt8]) async throws {
        if let full = serving.add(bytes) { try await sendEvents(full) }
    }

    func sendEvents(_ frame: [[UInt8]]) async throws {
        try await acquireCredit(for: .events)
        report.eventsSent += frame.count
        send(.events(frame))
    }

    /// Waits for the window's units for `frame`, and for the frames not yet
    /// taken by the network to fit `SyncLimits.outboxBytes`: the wide window
    /// lets a reading peer commit large batches, while a peer that stops
    /// reading holds only that much of this side's memory (Specs/sync.md §5).
    func acquireCredit(for frame: ServeState.DataFrame) async throws {
        while outboxLoad.bytes > SyncLimits.outboxBytes || !serving.takeCredit(for: frame) {
            if ending.isStopping { throw CancellationError() }
            try await creditWakeup.wait()
        }
    }
}
