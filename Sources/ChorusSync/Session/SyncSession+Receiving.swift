import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import Foundation

/// Received events and blobs on their way into the store: checked against
/// the requests, committed in batches, acknowledged once durable (Specs/sync.md §4.3–4.4).
extension SyncSession {
    func queue(_ job: ServeJob, items: Int) throws {
        try serving.queue(items)
        serveJobs.yield(job)
    }

    /// Events a batch gathers from the buffered frames (at least one frame):
    /// about 0.15 s of verification on two cores. Larger batches hold their
    /// frames' acknowledgements back longer: with 70,000 events in one batch
    /// the peer's window shut while it was verified and the next batch found
    /// one frame waiting.
    static let batchEvents = 8_192

    /// One batch handed to the node's ingest: its events (the refills from
    /// `refillsFrom` on) and the frames its acknowledgement covers.
    struct IngestBatch: Sendable {
        let ingest: Task<IngestReport, Never>
        let events: [Event]
        let refillsFrom: Int
        let frames: Int
    }

    /// Batches whose verification runs at once: the next starts while one
    /// is finishing, so the cores do not wait between them.
    static let batchesVerifying = 2

    /// Verifies and commits buffered frames until none are left (Specs/sync.md
    /// §4.3). A batch is verified while the ones before it are written (and
    /// while the one before it finishes its verification), and queued behind
    /// them in the node's writer; another task acknowledges each batch once
    /// it is durable, in order, so an acknowledgement never waits for a
    /// later batch's verification. Every batch is unacknowledged frames, so
    /// the window bounds them.
    func drainIngestBuffer() async {
        let (started, queue) = AsyncStream.makeStream(of: IngestBatch.self)
        let acknowledging = Task { await self.acknowledgeInOrder(started) }
        // Each started batch's hand-over to the writer, oldest first; the
        // next batch goes to the writer after the last one.
        var verifying: [Task<Void, Never>] = []
        var lastHandedOver: Task<Void, Never>? = nil
        while intake.error == nil {
            if intake.frames.isEmpty {
                if intake.batchesPending == 0 { break }
                try? await ingestWakeup.wait()
                continue
            }
            if verifying.count >= Self.batchesVerifying {
                await verifying.removeFirst().value
                continue
            }
            var frames = 0
            var events: [Event] = []
            var refills: [Event] = []
            while frames < intake.frames.count, frames == 0 || events.count + refills.count < Self.batchEvents {
                events += intake.frames[frames].events
                refills += intake.frames[frames].refills
                frames += 1
            }
            intake.frames.removeFirst(frames)
            // Refills are rare: without them the batch is the events array
            // itself, not a copy of every event.
            let all = refills.isEmpty ? events : events + refills
            let node = self.node
            let (enqueued, signal) = AsyncStream<Void>.makeStream()
            intake.active = true
            intake.batchesPending += 1
            // Every requested event is in hand and this batch is one of the
            // last two (which verify together): nothing will overlap their
            // commits but their own verification, so they go to the writer
            // in parts as verified. Handed over whole, the second last came
            // with the last at the end and the writer worked alone on both.
            let left = intake.frames.reduce(0) { $0 + $1.events.count + $1.refills.count }
            let last = !fetch.awaitsRequestedEvents && left < Self.batchesVerifying * Self.batchEvents
            let after = lastHandedOver
            let ingest = Task { await node.ingest(events: all, last: last, after: after, enqueued: { signal.finish() }) }
            let handedOver = Task { for await _ in enqueued {} }
            verifying.append(handedOver)
            lastHandedOver = handedOver
            queue.yield(IngestBatch(ingest: ingest, events: all, refillsFrom: events.count, frames: frames))
        }
        queue.finish()
        // After a failure, what was already queued still becomes durable
        // before the session reports its end. Otherwise nothing is pending
        // and this returns at once, with no frame arriving meanwhile.
        if intake.batchesPending > 0 { await acknowledging.value }
        intake.active = false
        intake.task = nil
    }

    /// Acknowledges each batch once it is durable, in the order they were
    /// started; after a failure, only waits for the rest to be written.
    func acknowledgeInOrder(_ batches: AsyncStream<IngestBatch>) async {
        for await batch in batches {
            let result = await batch.ingest.value
            intake.batchesPending -= 1
            if intake.error == nil {
                do {
                    try ingested(batch.events, result, refillsFrom: batch.refillsFrom)
                    send(.ack(UInt64(batch.frames)))
                } catch {
                    intake.error = error
                }
            }
            wakeIngest()
        }
    }

    /// Resumes the ingest loop when it waits for frames or durability.
    func wakeIngest() { ingestWakeup.wake() }

    /// Waits until every received event frame is committed.
    func finishIngest() async throws {
        if let task = intake.task { await task.value }
        if let error = intake.error { throw error }
    }

    /// Checks a frame's events against what was requested (feed order, no
    /// unrequested events); returns them and the refilled payloads.
    func checkEvents(_ envelopes: [[UInt8]]) async throws -> (events: [Event], refills: [Event]) {
        // Awaited off the actor; frames stay in order, since the receive
        // loop handles one message at a time.
        let decoded = await Node.decode(envelopes)
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
            // The peer holds what it sends: live announcements skip it.
            peerHeads.note(event.author, holds: event.seq)
            if options.hostsListed, try !hosts(event) {
                report.notHosted += 1
                continue
            }
            keyTriggers.note(event)
            events.append(event)
        }
        return (events, payloadRefills)
    }

    /// Whether a listed relay keeps this requested event (Specs/sync.md
    /// §8.1): a directory feed keeps its bindings and relay lists and
    /// nothing from the first event of another kind on (so its feed stays
    /// without gaps); a hosted feed keeps everything.
    func hosts(_ event: Event) throws -> Bool {
        let author = event.author
        if hosting.notHosted.contains(author) { return false }
        if event.kind.isDirectoryKind || hosting.hosted.contains(author) { return true }
        if try FeedHosting.level(of: author, at: node, peerUser: peerHello?.user) == .all {
            hosting.hosted.insert(author)
            return true
        }
        hosting.notHosted.insert(author)
        return false
    }

    /// Accounts for one durable batch: events at `refillsFrom` and after
    /// were payload refills.
    func ingested(_ events: [Event], _ result: IngestReport, refillsFrom: Int) throws {
        idleWatch.progressed()
        // By index: zipping copied every event (a retain of each of its buffers).
        for index in events.indices where index < result.results.count {
            try fetch.ingested(events[index], result.results[index], refill: index >= refillsFrom, report: &report)
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
        if let error = intake.blobError { throw error }
        let limit = UInt64(node.options.maxBlobBytes)
        let blob = try blobFetch.chunk(hash: hash, offset: offset, total: total, bytes: bytes, limit: limit)
        if blob == nil, intake.blobTask == nil {
            send(.ack(1))
            return
        }
        if let blob { intake.blobs.blobs.append((hash, blob)) }
        intake.blobs.frames += 1
        if intake.blobTask == nil { intake.blobTask = Task { await self.drainBlobBuffer() } }
    }

    /// Stores buffered blobs until none are left, one commit for all that
    /// arrived while the previous commit was written, acknowledging their
    /// frames once durable.
    func drainBlobBuffer() async {
        while intake.blobError == nil, intake.blobs.frames > 0 {
            let batch = intake.blobs
            intake.blobs = ([], 0)
            do {
                let stored = try await node.storeReceivedBlobs(batch.blobs)
                report.blobsReceived += stored
                idleWatch.progressed()
                reportProgress()
                send(.ack(UInt64(batch.frames)))
            } catch {
                intake.blobError = SyncError.local("could not store \(batch.blobs.count) received blobs: \(error)")
            }
        }
        intake.blobTask = nil
    }

    /// Waits until every received blob is stored.
    func finishBlobs() async throws {
        if let task = intake.blobTask { await task.value }
        if let error = intake.blobError { throw error }
    }

    /// Decodes envelopes on all cores (decoding checks canonical encoding,
    /// header, payload hash and schema; ingest verifies signatures).
    // MARK: Idle timeout

    /// Ends the session with `idle_timeout` when it waits for the peer and
    /// nothing moves for `options.idleTimeout`: no frame arrives, none is
    /// handed to the network, no local ingest finishes. A live session with
    /// nothing outstanding is not idle, just quiet.
    func watchdog() async throws {
        let limit = options.idleTimeout
        let tick = min(limit / 4, .milliseconds(500))
        while !ending.isStopping {
            try await Task.sleep(for: tick)
            guard !ending.isStopping, !intake.active else { continue }
            let waiting = !report.complete || idleWatch.fetchWaiting || creditWakeup.hasWaiter || outboxLoad.frames > 0
            if waiting, idleWatch.isIdle(now: .now, limit: limit) {
                throw SyncError.idle("no progress for \(limit) (\(outboxLoad.frames) frames not taken by the peer)")
            }
        }
    }
}

extension SyncMessage.Code {
    /// What a received message is to the receiver's pipeline of events
    /// and blobs being stored (Specs/sync.md §4.3).
    enum ReceivedRole {
        /// More events, or more blob chunks: they join the pipeline.
        case events, blobData
        /// About this side's own sending: an `ack` of its frames, the
        /// peer's `done` (completion also waits for this side's fetch).
        case ownSending
        /// The rest, handled once what came before it is stored, so the
        /// protocol sees it committed.
        case afterStored
    }

    /// One exhaustive switch, so a new message has to be placed.
    var receivedRole: ReceivedRole {
        switch self {
        case .events: .events
        case .blobData: .blobData
        case .ack, .done: .ownSending
        case .hello, .have, .haveEnd, .want, .wantEnd, .eventsEnd, .blobWant, .blobWantEnd, .blobMissing, .blobEnd, .error,
            .payloadWant, .payloadWantEnd, .invite, .blobSerial, .reconcile, .sketchInfo, .sketch, .sketchResult, .scope, .scopeEnd,
            .scopeAnswered, .inbox, .deliver, .deliverEnd, .notices, .inboxEnd:
            .afterStored
        }
    }

    /// Whether the receiver handles this message only once the events it
    /// received before it are stored. Waiting at an `ack` or `done` too
    /// stopped reading until everything buffered was durable: the pipeline
    /// emptied, and in a one-way sync the cores idled.
    var waitsForReceivedEvents: Bool { receivedRole == .afterStored || receivedRole == .blobData }

    /// Whether the receiver handles this message only once the blobs it
    /// received before it are stored.
    var waitsForReceivedBlobs: Bool { receivedRole == .afterStored || receivedRole == .events }
}
