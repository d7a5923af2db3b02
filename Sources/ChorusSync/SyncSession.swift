import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusParallel
import Dispatch
import Foundation

/// One symmetric sync with one peer over a `FrameTransport`
/// (Specs/sync.md): each side announces its feeds, requests the ranges it
/// lacks, streams what the other requested, fetches missing blobs, and says
/// "done"; with live mode both stay connected and announce new heads.
public actor SyncSession {
    public nonisolated let node: Node
    public nonisolated let transport: any FrameTransport
    public nonisolated let options: SyncOptions
    let peers: PeerStore?
    let blobs: BlobAccess

    private var report: SyncReport
    private let started = ContinuousClock.now

    // Outbox: every frame goes through one writer task, so handlers never
    // block on the network; data frames are bounded by the window.
    private let outbox: AsyncStream<[UInt8]>.Continuation
    private let outboxStream: AsyncStream<[UInt8]>
    private var writer: Task<Void, Never>? = nil

    private var peerHello: SyncHello? = nil
    private var isLive = false
    private var firstError: SyncError? = nil
    private var iAmDone = false
    private var peerDone = false
    private var closing = false

    // Fetching (what this node asked for).
    private enum FetchSignal: Sendable { case announced(UInt64), eventsEnd, blobEnd, payloadEnd }
    private var fetch = FetchState()
    /// Whether an event received could entitle a member device to a chat
    /// key (a binding, a device key, a membership change, a key event, a
    /// message): only then does the session end with key sharing.
    private var receivedKeyRelevantEvents = false
    private var blobFetch = BlobFetchState(remembered: nil)
    /// Events received when the last refill ran (refill runs again only when more arrived).
    private var refillCheckedAt: Int? = nil

    // Progress, for the idle timeout.
    private var lastProgress = ContinuousClock.now
    private var fetchWaiting = false
    private var ingesting = false
    /// Received event frames waiting for the ingest in flight. Each ingest
    /// takes every frame that arrived while the previous one was being
    /// committed (up to the peer's window), so one durable commit covers
    /// several frames and the receive loop keeps checking frames meanwhile.
    private var ingestBuffer: (events: [Event], refills: [Event], frames: Int) = ([], [], 0)
    private var ingestTask: Task<Void, Never>? = nil
    private var ingestError: (any Error)? = nil
    private var outboxFrames = 0
    private var outboxBytes = 0
    /// The most bytes ever queued for the network and not yet handed to it.
    public private(set) var peakOutboxBytes = 0
    /// Bytes queued for the network and not yet handed to it.
    public var queuedOutboxBytes: Int { outboxBytes }

    // Serving (what the peer asked for).
    private enum ServeJob: Sendable { case ranges([FeedRange]), eventsEnd, blobs([Hash32]), blobEnd, payloads([EventID]), payloadEnd }
    private let serveJobs: AsyncStream<ServeJob>.Continuation
    private let serveStream: AsyncStream<ServeJob>
    private var serving: ServeState
    private var creditWaiter: CheckedContinuation<Void, any Error>? = nil
    /// The highest seq per author the peer is known to hold (from its
    /// announcements and what was sent), so live announcements skip them.
    private var peerKnown: [PublicKey: UInt64] = [:]

    private var tasks: [Task<Void, Never>] = []
    private var signalQueue: [FetchSignal] = []
    private var signalWaiter: CheckedContinuation<FetchSignal?, Never>? = nil
    private var signalsFinished = false
    private var startTag: Hash32 = .zero
    private var finalFeeds: Set<PublicKey>? = nil
    private var peerDonePosition: UInt64 = 0
    private var announcedSnapshot: (position: UInt64, accepted: Int)? = nil
    private var startSince: UInt64 = 0
    /// Whether this session's first announcement is a reconciliation, and
    /// the peer's rounds on their way to it (Specs/sync.md §4.2.1).
    private var reconciling = false
    private var reconcileFinished = false
    private let reconcileRounds: AsyncStream<ReconcileRound>.Continuation
    private let reconcileStream: AsyncStream<ReconcileRound>

    public init(node: Node, transport: any FrameTransport, options: SyncOptions = SyncOptions(), peers: PeerStore? = nil) throws {
        self.node = node
        self.transport = transport
        self.options = options
        self.peers = peers
        self.blobs = try BlobAccess(node: node)
        self.report = SyncReport(peer: transport.peer)
        self.serving = ServeState(window: options.window)
        (outboxStream, outbox) = AsyncStream.makeStream(of: [UInt8].self)
        (serveStream, serveJobs) = AsyncStream.makeStream(of: ServeJob.self)
        (reconcileStream, reconcileRounds) = AsyncStream.makeStream(of: ReconcileRound.self)
    }

    /// Runs the session to its end: returns the report when both sides said
    /// "done" (and, in live mode, the connection then closed), throws a
    /// `SyncError` otherwise. Cancelling the calling task closes the
    /// connection.
    public func run() async throws -> SyncReport {
        let transport = self.transport
        var report = try await withTaskCancellationHandler {
            try await runSession()
        } onCancel: {
            Task { await transport.close() }
        }
        // Events just received may entitle member devices to chat keys this
        // device holds (a user's new device, a new member): share them now,
        // so the next session carries them (Specs/encryption.md §6 rule 5).
        if receivedKeyRelevantEvents { report.keyEventsWritten = (try? await node.shareChatKeys()) ?? 0 }
        return report
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

    private func runSession() async throws -> SyncReport {
        let stream = outboxStream
        let transport = self.transport
        writer = Task { [weak self] in
            for await frame in stream {
                do {
                    try await transport.send(frame)
                    await self?.sent(frame.count)
                } catch {
                    await self?.writeFailed()
                    return
                }
            }
        }
        do {
            try await handshake()
            let live = isLive
            lastProgress = .now
            tasks.append(Task { await self.runTask { try await $0.watchdog() } })
            tasks.append(Task { await self.runTask { try await $0.announceLoop(live: live) } })
            tasks.append(Task { await self.runTask { try await $0.serveLoop() } })
            tasks.append(Task { await self.runTask { try await $0.fetchLoop() } })
            try await receiveLoop()
        } catch let error as SyncError {
            fail(error)
        } catch {
            fail(.connectionClosed)
        }
        return try await finish()
    }

    /// The connection refused a frame: after completion (live mode) that is
    /// the peer closing, the normal end of a live session (§4.6); before, a
    /// cut connection.
    private func writeFailed() {
        guard report.complete else {
            fail(.connectionClosed)
            return
        }
        closing = true
        outbox.finish()
        let transport = self.transport
        Task { await transport.close() }
    }

    private func runTask(_ body: (isolated SyncSession) async throws -> Void) async {
        do { try await body(self) } catch let e as SyncError { fail(e) } catch is CancellationError {} catch {
            fail(.local("\(error)"))
        }
    }

    private func sent(_ bytes: Int) {
        report.framesSent += 1
        report.bytesSent += bytes
        outboxFrames -= 1
        outboxBytes -= bytes
        lastProgress = .now
    }

    private func send(_ message: SyncMessage) {
        let frame = message.encoded()
        outboxFrames += 1
        outboxBytes += frame.count
        peakOutboxBytes = max(peakOutboxBytes, outboxBytes)
        outbox.yield(frame)
    }

    // MARK: Idle timeout

    /// Ends the session with `idle_timeout` when it waits for the peer and
    /// nothing moves for `options.idleTimeout`: no frame arrives, none is
    /// handed to the network, no local ingest finishes. A live session with
    /// nothing outstanding is not idle, just quiet.
    private func watchdog() async throws {
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

    // MARK: Hello

    private func handshake() async throws {
        let peerKey = transport.peer.key
        let scopeFeeds = try options.scope.feeds(of: node)
        let tag = ReplicationScope.tag(scopeFeeds)
        var since: UInt64 = 0
        let record = try peers?.record(peerKey)
        if let record, record.scopeTag == tag { since = record.position }
        blobFetch = BlobFetchState(remembered: record.flatMap { r in r.blobSerial.map { (serial: $0, lacked: r.lackedBlobs) } })
        startTag = tag
        startSince = since
        var caps: SyncCapabilities = [.refill]
        if options.invitations { caps.insert(.invitations) }
        if options.live { caps.insert(.live) }
        if options.blobs { caps.formUnion([.blobs, .blobSerial]) }
        if options.reconcile { caps.insert(.reconcile) }
        send(.hello(SyncHello(user: node.identity.user, capabilities: caps, hops: options.scope.hops.map { UInt64(max(0, $0)) }, since: since)))
        let transport = self.transport
        let frame: [UInt8]?
        do {
            frame = try await withTimeout(options.helloTimeout, "waiting for the peer's hello", onTimeout: { await transport.close() }) {
                try await transport.receive()
            }
        } catch let error as SyncError { throw error } catch { throw Self.sessionError(transport: error) }
        guard let frame else { throw SyncError.connectionClosed }
        countReceived(frame)
        guard case .hello(let hello) = try SyncMessage.decode(frame) else {
            throw SyncError.unexpected("the first message must be a hello")
        }
        peerHello = hello
        report.peerUser = hello.user
        if options.blobs, hello.capabilities.contains(.blobSerial) { send(.blobSerial(try blobs.serial())) }
        isLive = options.live && hello.capabilities.contains(.live)
        report.live = isLive
        // Both sides decide alike from the two hellos (Specs/sync.md §4.2.1).
        reconciling =
            caps.contains(.reconcile) && hello.capabilities.contains(.reconcile) && options.scope.hops == nil && hello.hops == nil
            && (since == 0 || hello.since == 0)
        report.reconciled = reconciling
    }

    private func countReceived(_ frame: [UInt8]) {
        report.framesReceived += 1
        report.bytesReceived += frame.count
        lastProgress = .now
    }

    /// The session error for a transport failure: an oversized frame or
    /// bytes that are not transport messages are the peer's fault; a
    /// transport idle timeout is an idle session; anything else is a
    /// closed connection.
    static func sessionError(transport error: any Error) -> SyncError {
        switch error as? SecureChannelError {
        case .frameTooLarge(let size, let limit): .frameTooLarge(size: size, limit: limit)
        case .decryptionFailed: .malformed("bytes that are not an authentic transport message")
        case .malformedMessage(let why): .malformed("transport: \(why)")
        case .idleTimeout: .idle("the connection made no progress for the transport's idle timeout")
        default: .connectionClosed
        }
    }

    // MARK: Receiving

    private func receiveLoop() async throws {
        while true {
            let frame: [UInt8]?
            do { frame = try await transport.receive() } catch {
                // A completed live session ends when either side closes.
                if firstError != nil || report.complete { return }
                throw Self.sessionError(transport: error)
            }
            guard let frame else {
                if report.complete { return }
                if firstError != nil { return }
                throw SyncError.connectionClosed
            }
            countReceived(frame)
            try await handle(try SyncMessage.decode(frame))
            if closing { return }
        }
    }

    private func handle(_ message: SyncMessage) async throws {
        // Everything but more events waits for the events before it to be
        // stored, so the rest of the protocol sees them committed.
        if case .events = message {} else { try await finishIngest() }
        switch message {
        case .hello:
            throw SyncError.unexpected("a second hello")
        case .reconcile(let round):
            guard reconciling, !reconcileFinished else { throw SyncError.unexpected("a reconcile round outside a reconciliation") }
            reconcileRounds.yield(round)
        case .have(let list):
            try fetch.have(list)
        case .haveEnd(let position):
            for a in fetch.haveEnd() { peerKnown[a.author] = max(peerKnown[a.author] ?? 0, a.seq) }
            signal(.announced(position))
        case .want(let ranges):
            try queue(.ranges(ranges), items: ranges.count)
        case .wantEnd:
            try queue(.eventsEnd, items: 1)
        case .blobWant(let hashes):
            guard peerHello?.capabilities.contains(.blobs) == true, options.blobs else {
                throw SyncError.unexpected("blob want without the blobs capability")
            }
            try queue(.blobs(hashes), items: hashes.count)
        case .blobWantEnd:
            try queue(.blobEnd, items: 1)
        case .payloadWant(let ids):
            try queue(.payloads(ids), items: ids.count)
        case .payloadWantEnd:
            try queue(.payloadEnd, items: 1)
        case .blobSerial(let serial):
            guard options.blobs, peerHello?.capabilities.contains(.blobSerial) == true else {
                throw SyncError.unexpected("a blob serial without the blobSerial capability")
            }
            try blobFetch.serial(serial)
        case .invite(let feeds):
            try fetch.invite(feeds, scoped: options.scope.hops != nil && options.invitations)
        case .events(let envelopes):
            if let error = ingestError { throw error }
            let (events, refills) = try checkEvents(envelopes)
            ingestBuffer.events += events
            ingestBuffer.refills += refills
            ingestBuffer.frames += 1
            if ingestTask == nil { ingestTask = Task { await self.drainIngestBuffer() } }
        case .ack(let n):
            try serving.acknowledge(n)
            if let w = creditWaiter {
                creditWaiter = nil
                w.resume()
            }
        case .eventsEnd:
            fetch.eventsEnd()
            signal(.eventsEnd)
        case .blobData(let hash, let offset, let total, let bytes):
            try await receiveBlob(hash: hash, offset: offset, total: total, bytes: bytes)
            send(.ack(1))
        case .blobMissing(let hash):
            try blobFetch.missing(hash)
            send(.ack(1))
        case .blobEnd:
            blobFetch.end()
            signal(.blobEnd)
        case .done(let position):
            guard !peerDone else { throw SyncError.unexpected("a second done") }
            peerDone = true
            peerDonePosition = position
            completeIfReady()
        case .error(let code, let text):
            throw SyncError.peerError(code: code, message: text)
        }
    }

    private func queue(_ job: ServeJob, items: Int) throws {
        try serving.queue(items)
        serveJobs.yield(job)
    }

    /// Commits buffered frames until none are left, acknowledging each
    /// commit's frames once it is durable.
    private func drainIngestBuffer() async {
        while ingestBuffer.frames > 0, ingestError == nil {
            let batch = ingestBuffer
            ingestBuffer = ([], [], 0)
            do {
                try await commitEvents(batch.events, refills: batch.refills)
                send(.ack(UInt64(batch.frames)))
            } catch {
                ingestError = error
            }
        }
        ingestTask = nil
    }

    /// Waits until every received event frame is committed.
    private func finishIngest() async throws {
        if let task = ingestTask { await task.value }
        if let error = ingestError { throw error }
    }

    /// Checks a frame's events against what was requested (feed order, no
    /// unrequested events); returns them and the refilled payloads.
    private func checkEvents(_ envelopes: [[UInt8]]) throws -> (events: [Event], refills: [Event]) {
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
            if try fetch.accept(event) {
                payloadRefills.append(event)
                continue
            }
            if Self.affectsChatKeys(event.kind) { receivedKeyRelevantEvents = true }
            events.append(event)
        }
        return (events, payloadRefills)
    }

    private func commitEvents(_ events: [Event], refills payloadRefills: [Event]) async throws {
        ingesting = true
        let all = events + payloadRefills
        let result = await node.ingest(events: all)
        ingesting = false
        lastProgress = .now
        for (index, (event, r)) in zip(all, result.results).enumerated() {
            try fetch.ingested(event, r, refill: index >= events.count, report: &report)
        }
    }

    private func receiveBlob(hash: Hash32, offset: UInt64, total: UInt64, bytes: [UInt8]) async throws {
        let limit = UInt64(node.options.maxBlobBytes)
        guard let blob = try blobFetch.chunk(hash: hash, offset: offset, total: total, bytes: bytes, limit: limit) else { return }
        do {
            if try await node.storeReceivedBlob(blob, hash: hash) { report.blobsReceived += 1 }
        } catch { throw SyncError.local("could not store blob \(hash.short): \(error)") }
    }

    /// Decodes envelopes on all cores (decoding checks canonical encoding,
    /// header, payload hash and schema; ingest verifies signatures).
    static func decodeAll(_ envelopes: [[UInt8]]) -> [Result<Event, EventError>] {
        let decode: @Sendable ([UInt8]) -> Result<Event, EventError> = { env in
            do throws(EventError) { return .success(try Event.decode(env)) } catch { return .failure(error) }
        }
        return parallelMap(envelopes, decode)
    }

    // MARK: Announcing

    private func announceLoop(live: Bool) async throws {
        guard let hello = peerHello else { return }
        // Subscribed before reading the position, so nothing slips between.
        let wakeups = live ? node.arrivalNotifier.subscribe() : nil
        var invitation: [PublicKey] = []
        if hello.hops != nil, hello.capabilities.contains(.invitations) {
            invitation = try ReplicationScope.invitation(for: hello.user, at: node)
            for chunk in invitation.chunked(SyncLimits.listBatch) { send(.invite(chunk)) }
        }
        var position = try node.lastArrival()
        announcedSnapshot = (position, report.eventsReceived)
        if reconciling {
            try await reconcileHeads()
        } else {
            var heads = try changedHeads(since: hello.since, upTo: position, initial: true)
            if hello.since > 0, !invitation.isEmpty {
                // The peer's remembered position predates the invitation: its
                // invited feeds are announced whether or not they changed since.
                let listed = Set(heads.map(\.author))
                for a in invitation where !listed.contains(a) {
                    if let h = try node.head(of: a) { heads.append(FeedAnnouncement(author: a, seq: h.seq, head: h.id)) }
                }
            }
            for chunk in heads.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
        }
        send(.haveEnd(position: position))
        guard let wakeups else { return }
        for await _ in wakeups {
            let now = try node.lastArrival()
            guard now > position else { continue }
            let changed = try changedHeads(since: position, upTo: now, initial: false)
            position = now
            let fresh = changed.filter { (peerKnown[$0.author] ?? 0) < $0.seq }
            guard !fresh.isEmpty else { continue }
            for a in fresh { peerKnown[a.author] = a.seq }
            for chunk in fresh.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
            send(.haveEnd(position: now))
        }
    }

    /// Announces the feeds the peer holds differently, found round by round
    /// (Specs/sync.md §4.2.1), instead of every feed. Live mode needs no
    /// reconciliation: it announces only what arrives after.
    private func reconcileHeads() async throws {
        var reconciler = Reconciler(heads: try node.heads().map { FeedAnnouncement(author: $0.author, seq: $0.head.seq, head: $0.head.id) })
        send(.reconcile(reconciler.firstRound()))
        report.reconcileRounds = 1
        var rounds = reconcileStream.makeAsyncIterator()
        while true {
            guard let peerRound = await rounds.next() else { throw SyncError.connectionClosed }
            let (announce, next) = try reconciler.receive(peerRound)
            for chunk in announce.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
            guard let next else { break }
            report.reconcileRounds += 1
            send(.reconcile(next))
        }
        // The peer ends in the same round; one more from it is out of step.
        reconcileFinished = true
        reconcileRounds.finish()
        if await rounds.next() != nil { throw SyncError.unexpected("a reconcile round after the reconciliation ended") }
    }

    /// Heads of the feeds that received events after arrival position
    /// `since` (every feed when `since` is 0 or far behind).
    private func changedHeads(since: UInt64, upTo position: UInt64, initial: Bool) throws -> [FeedAnnouncement] {
        if since == 0 || since > position || position - since > 50_000 {
            return try node.heads().map { FeedAnnouncement(author: $0.author, seq: $0.head.seq, head: $0.head.id) }
        }
        var authors: Set<PublicKey> = []
        var from = since
        while true {
            let page = try node.arrivals(since: from, limit: 4096)
            for s in page { authors.insert(s.event.author) }
            guard let last = page.last, page.count == 4096 else { break }
            from = last.arrival
        }
        return try authors.sorted().compactMap { a in
            try node.head(of: a).map { FeedAnnouncement(author: a, seq: $0.seq, head: $0.id) }
        }
    }

    // MARK: Serving

    private func serveLoop() async throws {
        for await job in serveStream {
            switch job {
            case .ranges(let ranges):
                serving.served(ranges.count)
                for r in ranges {
                    if let prev = r.prev {
                        let before = try node.feed(r.author, fromSeq: r.from - 1, limit: 1).first
                        if let before, before.event.seq == r.from - 1, before.event.id != prev {
                            try await addToBatch(before.event)  // fork evidence instead of the range
                            continue
                        }
                    }
                    var next = r.from
                    while next <= r.to {
                        // Served as stored: no decoding and re-encoding.
                        let page = try node.feedEnvelopes(r.author, fromSeq: next, limit: Int(min(512, r.to - next + 1)))
                        guard let last = page.last else { break }
                        for s in page { try await addToBatch(envelope: s.envelope) }
                        next = last.seq + 1
                    }
                    if next > r.from { peerKnown[r.author] = max(peerKnown[r.author] ?? 0, next - 1) }
                }
            case .eventsEnd:
                serving.served(1)
                try await flushBatch()
                send(.eventsEnd)
            case .payloads(let ids):
                serving.served(ids.count)
                for id in ids {
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
                    guard let bytes = try blobs.servable(hash) else {
                        try await acquireCredit()
                        send(.blobMissing(hash))
                        continue
                    }
                    var offset = 0
                    while offset < bytes.count {
                        let end = min(bytes.count, offset + SyncLimits.blobChunkBytes)
                        try await acquireCredit()
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

    private func flushBatch() async throws {
        guard let frame = serving.flush() else { return }
        try await sendEvents(frame)
    }

    private func addToBatch(_ event: Event) async throws { try await addToBatch(envelope: event.encoded()) }

    private func addToBatch(envelope bytes: [UInt8]) async throws {
        if let full = serving.add(bytes) { try await sendEvents(full) }
    }

    private func sendEvents(_ frame: [[UInt8]]) async throws {
        try await acquireCredit()
        report.eventsSent += frame.count
        send(.events(frame))
    }

    private func acquireCredit() async throws {
        while !serving.takeCredit() {
            if firstError != nil || closing { throw CancellationError() }
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in creditWaiter = c }
        }
    }

    // MARK: Fetching

    private func fetchLoop() async throws {
        var firstRound = true
        while let signal = await nextSignal() {
            guard case .announced(let position) = signal else { throw SyncError.unexpected("\(signal) before any request") }
            fetch.startRound()
            var feeds = try scopeFeeds()
            var asked: [PublicKey: UInt64] = [:]
            while true {
                let wants = try fetch.wants(in: feeds, asked: &asked, store: node)
                if wants.isEmpty { break }
                for chunk in wants.chunked(SyncLimits.listBatch) { send(.want(chunk)) }
                send(.wantEnd)
                try await expect("events end") { if case .eventsEnd = $0 { true } else { false } }
                guard feeds != nil else { break }
                let grown = try scopeFeeds()
                if grown == feeds { break }
                feeds = grown
            }
            try await refillPayloads()
            if options.blobs, peerHello?.capabilities.contains(.blobs) == true {
                let missing = blobFetch.request(try blobs.missing())
                if !missing.isEmpty {
                    report.blobsRequested += missing.count
                    for chunk in missing.chunked(SyncLimits.listBatch) { send(.blobWant(chunk)) }
                    send(.blobWantEnd)
                    try await expect("blob end") { if case .blobEnd = $0 { true } else { false } }
                }
            }
            fetch.endRound()
            if firstRound {
                firstRound = false
                iAmDone = true
                finalFeeds = feeds
                send(.done(position: try donePosition()))
                completeIfReady()
            } else if !fetch.sessionIncomplete {
                try remember(position: position, final: false)
            }
        }
    }

    /// Asks the peer for the full events of payloads held here purged
    /// although no deletion covers them (Specs/sync.md §4.7), once per
    /// session per event, and again only after new events arrived.
    private func refillPayloads() async throws {
        guard options.refill, peerHello?.capabilities.contains(.refill) == true else { return }
        if let checked = refillCheckedAt, checked == report.eventsReceived { return }
        refillCheckedAt = report.eventsReceived
        let ids = fetch.refills(among: try node.projections.eventsMissingPayload(limit: SyncLimits.maxRefill))
        guard !ids.isEmpty else { return }
        for chunk in ids.chunked(SyncLimits.listBatch) { send(.payloadWant(chunk)) }
        send(.payloadWantEnd)
        try await expect("events end after payload wants") { if case .eventsEnd = $0 { true } else { false } }
        fetch.refillsAnswered()
    }

    private func expect(_ wanted: String, _ matches: (FetchSignal) -> Bool) async throws {
        fetchWaiting = true
        let next = await nextSignal()
        fetchWaiting = false
        guard let s = next else { throw CancellationError() }
        guard matches(s) else { throw SyncError.unexpected("\(s) while waiting for \(wanted)") }
    }

    private func signal(_ s: FetchSignal) {
        if let w = signalWaiter {
            signalWaiter = nil
            w.resume(returning: s)
        } else {
            signalQueue.append(s)
        }
    }

    private func nextSignal() async -> FetchSignal? {
        if !signalQueue.isEmpty { return signalQueue.removeFirst() }
        if signalsFinished { return nil }
        return await withCheckedContinuation { signalWaiter = $0 }
    }

    private func finishSignals() {
        signalsFinished = true
        if let w = signalWaiter {
            signalWaiter = nil
            w.resume(returning: nil)
        }
    }

    /// The feeds in scope now, with those the peer invited this node to.
    private func scopeFeeds() throws -> Set<PublicKey>? {
        try options.scope.feeds(of: node)?.union(fetch.invited)
    }

    /// The position to send in "done": the current arrival position when
    /// every arrival since the announced snapshot came from this peer (so
    /// the peer never hears back about its own events), else the snapshot.
    private func donePosition() throws -> UInt64 {
        guard let snapshot = announcedSnapshot else { return 0 }
        let now = try node.lastArrival()
        if now >= snapshot.position, now - snapshot.position == UInt64(report.eventsReceived - snapshot.accepted) { return now }
        return snapshot.position
    }

    /// Records what the peer announced, so the next sync asks only for
    /// feeds that changed since (request skipping).
    private func remember(position: UInt64, final: Bool = true) throws {
        guard let peers else { return }
        let complete = !fetch.sessionIncomplete
        let tag = ReplicationScope.tag(finalFeeds)
        let user = peerHello?.user
        let received = UInt64(report.eventsReceived)
        let sentCount = UInt64(report.eventsSent)
        // A scope that grew during a session that skipped unchanged feeds
        // may miss feeds the peer did not announce: ask for all next time.
        let forceFull = startSince > 0 && tag != startTag
        let blobSerial = blobFetch.peerSerial
        let lacked = blobFetch.lacked
        do {
            try peers.update(transport.peer.key, address: transport.peer.address) { r in
                if forceFull {
                    r.position = 0
                    r.scopeTag = tag
                } else if complete {
                    r.position = final ? position : max(r.position, position)
                    r.scopeTag = tag
                }
                r.lastSynced = UInt64(Date().timeIntervalSince1970 * 1000)
                guard final else { return }
                if let serial = blobSerial {
                    r.blobSerial = serial
                    r.lackedBlobs = lacked
                } else {
                    r.blobSerial = nil
                    r.lackedBlobs = []
                }
                r.user = user
                r.eventsReceived += received
                r.eventsSent += sentCount
                r.sessions += 1
            }
        } catch { throw SyncError.local("could not record the peer: \(error)") }
    }

    // MARK: Ending

    private func completeIfReady() {
        guard iAmDone, peerDone, !report.complete else { return }
        report.complete = true
        do { try remember(position: peerDonePosition) } catch { fail(error as? SyncError ?? .local("\(error)")) }
        var snapshot = report
        snapshot.seconds = seconds
        options.onComplete?(snapshot)
        if !isLive {
            // Nothing more to send or receive: flush, then close, which ends the receive loop.
            closing = true
            outbox.finish()
            let writer = self.writer
            let transport = self.transport
            Task {
                await writer?.value
                await transport.close()
            }
        }
    }

    private var seconds: Double {
        let d = ContinuousClock.now - started
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    private func fail(_ error: SyncError) {
        guard firstError == nil, !(closing && report.complete) else { return }
        firstError = error
        closing = true
        if let w = creditWaiter {
            creditWaiter = nil
            w.resume(throwing: CancellationError())
        }
        // Tell the peer why (best effort), then cut the connection.
        let notify: SyncMessage? =
            switch error {
            case .peerError, .connectionClosed: nil
            default: .error(code: error.code, message: error.description)
            }
        let transport = self.transport
        if let notify {
            let frame = notify.encoded()
            Task {
                _ = try? await withTimeout(.seconds(1), "sending an error", onTimeout: { await transport.close() }) {
                    try await transport.send(frame)
                }
                await transport.close()
            }
        } else {
            Task { await transport.close() }
        }
        outbox.finish()
    }

    private func finish() async throws -> SyncReport {
        finishSignals()
        serveJobs.finish()
        if let w = creditWaiter {
            creditWaiter = nil
            w.resume(throwing: CancellationError())
        }
        for t in tasks { t.cancel() }
        if firstError == nil {
            outbox.finish()
            await writer?.value
        }
        await transport.close()
        for t in tasks { await t.value }
        // Frames already received are committed before the session ends,
        // failed or not: when `run` returns, the store holds all of them
        // (and the next session asks only for what follows).
        if let task = ingestTask { await task.value }
        writer?.cancel()
        report.seconds = seconds
        if let firstError { throw firstError }
        if !report.complete { throw SyncError.connectionClosed }
        return report
    }
}

