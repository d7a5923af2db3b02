import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusParallel
import Foundation

/// Received events and blobs on their way into the store: checked against
/// the requests, committed in batches, acknowledged once durable (Specs/sync.md §4.3–4.4).
extension SyncSession {
    /// Received batches verified or being written at once: three measured
    /// faster than two in `chorus-bench sync` (11,200/s against 9,900/s,
    /// three runs each), at no cost in memory beyond the window.
    static let batchesInFlight = 3

    func queue(_ job: ServeJob, items: Int) throws {
        try serving.queue(items)
        serveJobs.yield(job)
    }

    /// Commits buffered frames until none are left, acknowledging each
    /// commit's frames once it is durable (Specs/sync.md §4.3). The frames
    /// that arrive while one batch is verified form the next batch, which is
    /// verified while the first is written and queued behind it, and so
    /// on: at most `Self.batchesInFlight` batches, acknowledged in order.
    /// All of them are unacknowledged frames, so the window bounds them.
    func drainIngestBuffer() async {
        var inFlight: [(ingest: Task<IngestReport, Never>, events: [Event], refillsFrom: Int, frames: Int)] = []
        while ingestError == nil {
            if ingestBuffer.frames > 0, inFlight.count < Self.batchesInFlight {
                let batch = ingestBuffer
                ingestBuffer = ([], [], 0)
                let all = batch.events + batch.refills
                let node = self.node
                let (queued, signal) = AsyncStream<Void>.makeStream()
                ingesting = true
                // Every requested event is in hand: nothing will overlap
                // this batch's commits but its own verification.
                let last = !fetch.awaitsRequestedEvents
                let ingest = Task { await node.ingest(events: all, last: last, enqueued: { signal.finish() }) }
                for await _ in queued {}
                inFlight.append((ingest, all, batch.events.count, batch.frames))
                continue
            }
            guard !inFlight.isEmpty else { break }
            let oldest = inFlight.removeFirst()
            let result = await oldest.ingest.value
            do {
                try ingested(oldest.events, result, refillsFrom: oldest.refillsFrom)
                send(.ack(UInt64(oldest.frames)))
            } catch {
                ingestError = error
            }
        }
        // After a failure, what was already queued still becomes durable
        // before the session reports its end.
        for rest in inFlight { _ = await rest.ingest.value }
        ingesting = false
        ingestTask = nil
    }

    /// Waits until every received event frame is committed.
    func finishIngest() async throws {
        if let task = ingestTask { await task.value }
        if let error = ingestError { throw error }
    }

    /// Checks a frame's events against what was requested (feed order, no
    /// unrequested events); returns them and the refilled payloads.
    func checkEvents(_ envelopes: [[UInt8]]) throws -> (events: [Event], refills: [Event]) {
        let decoded = Self.decodeAll(envelopes)
        var events: [Event] = []
        events.reserveCapacity(decoded.count)
        var payloadRefills: [Event] = []
        for r in decoded {
            let event: Event
            switch r {
            case .success(let e): event = e
            case .failure(let e): throw SyncError.badEvent(code: e.code, detail: e.description)
            }
            switch try fetch.accept(event, store: node) {
            case .refill:
                payloadRefills.append(event)
                continue
            case .skipped: continue
            case .event: break
            }
            if Self.affectsChatKeys(event.kind) { receivedKeyRelevantEvents = true }
            // The peer holds what it sends: live announcements skip it.
            if (peerKnown[event.author] ?? 0) < event.seq { peerKnown[event.author] = event.seq }
            events.append(event)
        }
        return (events, payloadRefills)
    }

    /// Accounts for one durable batch: events at `refillsFrom` and after
    /// were payload refills.
    func ingested(_ events: [Event], _ result: IngestReport, refillsFrom: Int) throws {
        lastProgress = .now
        for (index, (event, r)) in zip(events, result.results).enumerated() {
            try fetch.ingested(event, r, refill: index >= refillsFrom, report: &report)
        }
        reportProgress()
    }

    func reportProgress() {
        guard let onProgress = options.onProgress else { return }
        onProgress(
            SyncProgress(
                eventsRequested: report.eventsRequested, eventsReceived: report.eventsReceived + report.duplicatesReceived,
                blobsRequested: report.blobsRequested, blobsReceived: report.blobsReceived, bytesReceived: report.bytesReceived))
    }

    /// Takes one `blobData` frame. A frame that completes a blob is
    /// acknowledged once the blob is durable, with the blobs completed
    /// while the previous blob commit was being written; a chunk that does
    /// not complete one is acknowledged at once, or with the frames before
    /// it when those wait for a commit (a blob larger than the window must
    /// not wait for its own acknowledgements).
    func receiveBlob(hash: Hash32, offset: UInt64, total: UInt64, bytes: [UInt8]) throws {
        if let error = blobError { throw error }
        let limit = UInt64(node.options.maxBlobBytes)
        let blob = try blobFetch.chunk(hash: hash, offset: offset, total: total, bytes: bytes, limit: limit)
        if blob == nil, blobTask == nil {
            send(.ack(1))
            return
        }
        if let blob { blobBuffer.blobs.append((hash, blob)) }
        blobBuffer.frames += 1
        if blobTask == nil { blobTask = Task { await self.drainBlobBuffer() } }
    }

    /// Stores buffered blobs until none are left, one commit for all that
    /// arrived while the previous commit was written, acknowledging their
    /// frames once durable.
    func drainBlobBuffer() async {
        while blobError == nil, blobBuffer.frames > 0 {
            let batch = blobBuffer
            blobBuffer = ([], 0)
            do {
                let stored = try await node.storeReceivedBlobs(batch.blobs)
                report.blobsReceived += stored
                lastProgress = .now
                reportProgress()
                send(.ack(UInt64(batch.frames)))
            } catch {
                blobError = SyncError.local("could not store \(batch.blobs.count) received blobs: \(error)")
            }
        }
        blobTask = nil
    }

    /// Waits until every received blob is stored.
    func finishBlobs() async throws {
        if let task = blobTask { await task.value }
        if let error = blobError { throw error }
    }

    /// Decodes envelopes on all cores (decoding checks canonical encoding,
    /// header, payload hash and schema; ingest verifies signatures).
    static func decodeAll(_ envelopes: [[UInt8]]) -> [Result<Event, EventError>] {
        let decode: @Sendable ([UInt8]) -> Result<Event, EventError> = { env in
            do throws(EventError) { return .success(try Event.decode(env)) } catch { return .failure(error) }
        }
        return parallelMap(envelopes, decode)
    }

    /// Kinds whose arrival can change who is entitled to which chat key
    /// (Specs/encryption.md §6 rule 5). An exhaustive switch: a new kind
    /// must say.
    static func affectsChatKeys(_ kind: EventKind) -> Bool {
        switch kind {
        case .deviceAdded, .deviceRemoved, .deviceKey, .chatCreated, .chatMemberAdded, .chatMemberRemoved, .chatKey, .messageSent:
            true
        case .profileSet, .pictureCreated, .pictureCaptioned, .pictureMoved, .pictureDeleted, .followAdded, .followRemoved, .likeAdded,
            .likeRemoved, .blockAdded, .blockRemoved, .messageEdited, .messageDeleted, .chatRead, .coinCredited, .coinSpent, .coinGiven,
            .coinRightsMoved, .slotUnlocked, .slotSet, .unknown:
            false
        }
    }

    // MARK: Idle timeout

    /// Ends the session with `idle_timeout` when it waits for the peer and
    /// nothing moves for `options.idleTimeout`: no frame arrives, none is
    /// handed to the network, no local ingest finishes. A live session with
    /// nothing outstanding is not idle, just quiet.
    func watchdog() async throws {
        let limit = options.idleTimeout
        let tick = min(limit / 4, .milliseconds(500))
        while !closing, firstError == nil {
            try await Task.sleep(for: tick)
            guard !closing, firstError == nil, !ingesting else { continue }
            let waiting = !report.complete || fetchWaiting || creditWaiter != nil || outboxFrames > 0
            if waiting, ContinuousClock.now - lastProgress >= limit {
                throw SyncError.idle("no progress for \(limit) (\(outboxFrames) frames not taken by the peer)")
            }
        }
    }
}
