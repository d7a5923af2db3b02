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
package actor SyncSession {
    /// The node this side syncs.
    package nonisolated let node: Node
    /// The authenticated frame stream to the peer.
    package nonisolated let transport: any FrameTransport
    /// What this side offers and does in the session.
    package nonisolated let options: SyncOptions
    let peers: PeerStore?
    let blobs: BlobAccess

    var report: SyncReport
    let started = ContinuousClock.now

    // Outbox: every frame goes through one writer task, so handlers never
    // block on the network; data frames are bounded by the window.
    let outbox: AsyncStream<[UInt8]>.Continuation
    let outboxStream: AsyncStream<[UInt8]>
    var writer: Task<Void, Never>? = nil

    var peerHello: SyncHello? = nil
    var isLive = false
    /// Both sides' `done`, closing, or the first error (Specs/sync.md §4.5).
    var ending = SessionEnding()

    // Fetching (what this node asked for).
    enum FetchSignal: Sendable { case announced(UInt64), eventsEnd, blobEnd, payloadEnd, pushEnd, scopeAnswered }
    var fetch = FetchState()
    /// What received events could change in chat key entitlements (a
    /// binding, a device key, a membership change, a key event, a message):
    /// only then does the session end with key sharing, over those chats.
    var keyTriggers = ChatKeyTriggers()
    /// This node's own feeds: its device's and its user key's.
    var ownFeeds: Set<PublicKey> { [node.identity.device.raw, node.identity.user.raw] }
    var blobFetch = BlobFetchState(remembered: nil)
    /// A listed relay's verdicts in this sync session (Specs/sync.md §8.1).
    var hosting = HostingVerdicts()
    /// Events received when the last refill ran (refill runs again only when more arrived).
    var refillCheckedAt: Int? = nil

    /// When anything last moved, for the idle timeout (`watchdog`).
    var idleWatch = IdleWatch()
    /// Received events on their way to the store, and received blobs on theirs.
    var intake = Intake()
    /// The ingest loop waiting for a frame to arrive or a batch to become durable.
    let ingestWakeup = Wakeup()
    /// Frames and bytes queued for the network and not yet handed to it.
    var outboxLoad = OutboxLoad()
    /// The most bytes ever queued for the network and not yet handed to it.
    package var peakOutboxBytes: Int { outboxLoad.peakBytes }
    /// Bytes queued for the network and not yet handed to it.
    package var queuedOutboxBytes: Int { outboxLoad.bytes }

    // Serving (what the peer asked for).
    enum ServeJob: Sendable {
        case ranges([FeedRange]), eventsEnd, blobs([Hash32]), blobEnd, payloads([EventID]), payloadEnd
        /// Events the sketch decoder sends unasked (Specs/sync.md §4.2.2), then `eventsEnd`.
        case push([FeedRange]), pushEnd
    }
    let serveJobs: AsyncStream<ServeJob>.Continuation
    let serveStream: AsyncStream<ServeJob>
    var serving: ServeState
    /// Wakes serving waiting for window units or outbox room; cancelled when the session fails or ends.
    let creditWakeup = Wakeup()
    /// What the peer is known to hold, so live announcements skip it.
    var peerHeads = PeerHeads()

    var tasks: [Task<Void, Never>] = []
    /// Sends the `error` frame of a failed session (best effort, at most 1 s).
    var notifying: Task<Void, Never>? = nil
    /// What the receive loop tells the fetching side (announcements, ends of answers), in order.
    let signals = AsyncQueue<FetchSignal>()
    /// Where the session's announcements started and ended (Specs/sync.md §4.2, §4.7).
    var positions = SessionPositions()
    /// How this session's first announcement is found (Specs/sync.md
    /// §4.2.1–4.2.2), and the peer's reconciliation messages on their way.
    var reconcile = ReconcileState()
    /// Scoped announcements (Specs/sync.md §4.10).
    var scopes = ScopeExchange()
    /// Either hello asked for a directory session (Specs/sync.md §4.12).
    var directorySession = false
    /// Opens when the peer's first scope list has ended, or the session has.
    let peerScopeArrived = Latch()
    /// Wakes live announcing (Specs/sync.md §4.6) when a commit writes a
    /// feed head its last reads covered, or when the peer's scope grew.
    var liveWake: AsyncStream<Void>.Continuation? = nil

    /// Prepares a session of `node` with the peer on `transport`; nothing is
    /// sent before `run()`. `peers`, when given, supplies what was remembered
    /// of the peer and records it at the end.
    package init(node: Node, transport: any FrameTransport, options: SyncOptions = SyncOptions(), peers: PeerStore? = nil) throws {
        self.node = node
        self.transport = transport
        self.options = options
        self.peers = peers
        self.blobs = try BlobAccess(node: node)
        self.report = SyncReport(peer: transport.peer)
        self.serving = ServeState(window: options.window, budget: options.budget)
        (outboxStream, outbox) = AsyncStream.makeStream(of: [UInt8].self)
        (serveStream, serveJobs) = AsyncStream.makeStream(of: ServeJob.self)
    }

    /// Runs the session to its end: returns the report when both sides said
    /// "done" (and, in live mode, the connection then closed), throws a
    /// `SyncError` otherwise. Cancelling the calling task closes the
    /// connection.
    package func run() async throws -> SyncReport {
        let transport = self.transport
        var report = try await withTaskCancellationHandler {
            try await runSession()
        } onCancel: {
            Task { await transport.close() }
        }
        // Events just received may entitle member devices to chat keys this
        // device holds (a user's new device, a new member): share them now,
        // so the next session carries them (Specs/encryption.md §6 rule 5).
        if !keyTriggers.isEmpty {
            do {
                report.keyEventsWritten += try await node.shareChatKeys(concerning: keyTriggers)
            } catch {
                // The events are held; only the wraps for member devices
                // are missing. Said, not thrown: the sync itself succeeded.
                report.keySharingError = "\(error)"
            }
        }
        // What the session remembered of its peer is durable when it returns
        // (a failure costs only a full exchange next time: PeerStore).
        await peers?.flush()
        return report
    }

    func runSession() async throws -> SyncReport {
        let stream = outboxStream
        let transport = self.transport
        writer = Task { [weak self] in
            for await frame in stream {
                do {
                    try await transport.send(frame)
                    await self?.sent(frame.count)
                } catch {
                    await self?.writeFailed(error)
                    return
                }
            }
        }
        do {
            try await handshake()
            let live = isLive
            idleWatch.progressed()
            tasks.append(Task { await self.runTask { try await $0.watchdog() } })
            tasks.append(Task { await self.runTask { try await $0.announceLoop(live: live) } })
            tasks.append(Task { await self.runTask { try await $0.serveLoop() } })
            tasks.append(Task { await self.runTask { try await $0.fetchLoop() } })
            try await receiveLoop()
        } catch let error as SyncError {
            fail(error)
        } catch {
            // Transport failures arrive as SyncError; anything else is this
            // node's own (its store, for one), not a closed connection.
            fail(.local("\(error)"))
        }
        return try await finish()
    }

    /// The connection refused a frame: after completion (live mode) that is
    /// the peer closing, the normal end of a live session (§4.6); before, a
    /// cut connection, or the transport's own error when it failed first (an
    /// oversized frame from the peer seen by the reader while this frame went
    /// out is the peer's fault, not a closed connection).
    func writeFailed(_ error: any Error) {
        guard report.complete else {
            fail(SyncError.fromTransport(error))
            return
        }
        ending.close()
        outbox.finish()
        let transport = self.transport
        Task { await transport.close() }
    }

    func runTask(_ body: (isolated SyncSession) async throws -> Void) async {
        do { try await body(self) } catch let e as SyncError { fail(e) } catch is CancellationError {} catch {
            fail(.local("\(error)"))
        }
    }

    func sent(_ bytes: Int) {
        report.framesSent += 1
        report.bytesSent += bytes
        outboxLoad.taken(bytes)
        idleWatch.progressed()
        // Serving may wait for the outbox to drain (`acquireCredit`).
        if outboxLoad.bytes <= SyncLimits.outboxBytes { creditWakeup.wake() }
    }

    func send(_ message: SyncMessage) {
        let frame = message.encoded()
        outboxLoad.queued(frame.count)
        outbox.yield(frame)
    }

    // MARK: Receiving

    func receiveLoop() async throws {
        while true {
            let frame: [UInt8]?
            do { frame = try await transport.receive() } catch {
                // A completed live session ends when either side closes; a
                // failed connection (no close from the peer) is said so.
                if ending.error != nil { return }
                if report.complete {
                    if !ending.closing { report.connectionLost = true }
                    return
                }
                throw SyncError.fromTransport(error)
            }
            guard let frame else {
                if report.complete { return }
                if ending.error != nil { return }
                throw SyncError.connectionClosed
            }
            countReceived(frame)
            try await handle(try SyncMessage.decode(frame))
            if ending.closing { return }
        }
    }

    func handle(_ message: SyncMessage) async throws {
        if message.code.waitsForReceivedEvents { try await finishIngest() }
        if message.code.waitsForReceivedBlobs { try await finishBlobs() }
        switch message {
        case .hello:
            throw SyncError.unexpected("a second hello")
        case .reconcile(let round):
            try reconcileInput(.round(round), "a reconcile round")
        case .sketchInfo(let info):
            try reconcileInput(.info(info), "a sketchInfo")
        case .sketch(let sums):
            try reconcileInput(.sums(sums), "sketch sums")
        case .sketchResult(let result):
            // The push follows at once: open it before its events arrive.
            if result.outcome == .found, result.push > 0, reconcile.sketchRole == .sketcher {
                fetch.openPush()
                report.eventsRequested += Int(clamping: result.push)
                reportProgress()
            }
            try reconcileInput(.result(result), "a sketch result")
        case .have(let list):
            // During a push, heads the pusher could not finish within its
            // budget (Specs/sync.md §4.2.2): asked for like announced ones.
            if fetch.pushOpen { fetch.learned(list) } else { try fetch.have(list) }
        case .haveEnd(let position):
            endAnnouncement()
            signals.push(.announced(position))
        case .want(let ranges):
            // Served together at `wantEnd`, in the order §4.3 gives.
            try serving.queue(ranges.count)
            serving.wanted += ranges
        case .wantEnd:
            let ranges = try bindersFirst(serving.wanted)
            serving.wanted = []
            serveJobs.yield(.ranges(ranges))
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
        case .scope(let feeds):
            guard scopes.expectsPeer else { throw SyncError.unexpected("a scope from a peer that does not replicate a scope or offer scoped") }
            scopes.peerPending += feeds
            if (scopes.peer?.count ?? 0) + scopes.peerPending.count > SyncLimits.maxScopeFeeds {
                throw SyncError.unexpected("a scope of over \(SyncLimits.maxScopeFeeds) feeds")
            }
        case .scopeEnd:
            guard scopes.expectsPeer else { throw SyncError.unexpected("a scope end from a peer that does not replicate a scope or offer scoped") }
            try receivedScope()
        case .scopeAnswered:
            guard scopes.sent != nil else { throw SyncError.unexpected("a scope answer to a side that sent no scope") }
            endAnnouncement()
            signals.push(.scopeAnswered)
        case .events(let envelopes):
            if let error = intake.error { throw error }
            intake.frames.append(try await checkEvents(envelopes))
            if intake.task == nil { intake.task = Task { await self.drainIngestBuffer() } } else { wakeIngest() }
        case .ack(let n):
            try serving.acknowledge(n)
            creditWakeup.wake()
        case .eventsEnd:
            if fetch.pushOpen {
                fetch.closePush()
                signals.push(.pushEnd)
            } else {
                fetch.eventsEnd()
                signals.push(.eventsEnd)
            }
        case .blobData(let hash, let offset, let total, let bytes):
            try receiveBlob(hash: hash, offset: offset, total: total, bytes: bytes)
        case .blobMissing(let hash):
            try blobFetch.missing(hash)
            send(.ack(1))
        case .blobEnd:
            blobFetch.end()
            signals.push(.blobEnd)
        case .done(let position):
            try ending.peerSaidDone()
            positions.peerDone = position
            completeIfReady()
        case .error(let code, let text):
            throw SyncError.peerError(code: code, message: text)
        case .inbox, .deliver, .deliverEnd, .notices, .inboxEnd:
            // Only right after the hellos, both offering `inbox` (§4.11).
            throw SyncError.unexpected("\(message.code) outside the inbox exchange")
        }
    }

    /// The peer's announcement ended (`haveEnd`, `scopeAnswered`): its heads
    /// are known to the fetcher, and held by the peer.
    func endAnnouncement() {
        for a in fetch.haveEnd() { peerHeads.note(a.author, holds: a.seq) }
    }

    // MARK: Ending

    func completeIfReady() {
        guard ending.bothDone, !report.complete else { return }
        report.complete = true
        do { try remember(position: positions.peerDone) } catch { fail(error as? SyncError ?? .local("\(error)")) }
        var snapshot = report
        snapshot.seconds = seconds
        options.onComplete?(snapshot)
        if !isLive {
            // Nothing more to send or receive: flush, then close, which ends the receive loop.
            ending.close()
            outbox.finish()
            let writer = self.writer
            let transport = self.transport
            Task {
                await writer?.value
                await transport.close()
            }
        }
    }

    var seconds: Double {
        let d = ContinuousClock.now - started
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    func fail(_ error: SyncError) {
        guard ending.fail(error, complete: report.complete) else { return }
        creditWakeup.cancel()
        // Tell the peer why (best effort), then cut the connection.
        let notify: SyncMessage? =
            switch error {
            case .peerError, .connectionClosed: nil
            default: .error(code: error.code, message: error.description)
            }
        let transport = self.transport
        if let notify {
            let frame = notify.encoded()
            // Awaited by `finish` before it closes the connection, so the peer
            // reads why. The bound is for a peer that stopped reading; a
            // short one also lost the frame to a busy machine that had not
            // yet run the send.
            notifying = Task {
                _ = try? await withTimeout(.seconds(10), "sending an error", onTimeout: { await transport.close() }) {
                    try await transport.send(frame)
                }
                await transport.close()
            }
        } else {
            Task { await transport.close() }
        }
        outbox.finish()
    }

    func finish() async throws -> SyncReport {
        signals.finish()
        peerScopeArrived.open()
        reconcile.inputs.finish()
        serveJobs.finish()
        creditWakeup.cancel()
        for t in tasks { t.cancel() }
        if ending.error == nil {
            outbox.finish()
            await writer?.value
        }
        await notifying?.value
        await transport.close()
        for t in tasks { await t.value }
        // Frames already received are committed before the session ends,
        // failed or not: when `run` returns, the store holds all of them
        // (and the next session asks only for what follows).
        if let task = intake.task { await task.value }
        if let task = intake.blobTask { await task.value }
        writer?.cancel()
        report.seconds = seconds
        if let error = ending.error { throw error }
        if !report.complete { throw SyncError.connectionClosed }
        return report
    }
}


/// What a session has received and not yet made durable (Specs/sync.md §4.3, §4.4).
struct Intake {
    /// Event frames waiting to be verified, in arrival order: each frame's
    /// checked events and payload refills. A batch takes the frames that
    /// arrived while the previous batch was verified, up to `batchEvents`,
    /// so one durable commit covers several frames and the receive loop
    /// keeps checking frames meanwhile.
    var frames: [(events: [Event], refills: [Event])] = []
    /// The loop that verifies and hands batches to the node's ingest.
    var task: Task<Void, Never>? = nil
    /// Whether that loop has work in hand (for the idle timeout).
    var active = false
    /// Batches handed to the node's ingest and not yet acknowledged.
    var batchesPending = 0
    var error: (any Error)? = nil
    /// Blob frames waiting for the blob commit in flight: the whole blobs
    /// among them, and how many frames their acknowledgement covers. Like
    /// events, the blobs that arrive while one commit is written share the
    /// next one (Specs/sync.md §4.4).
    var blobs: (blobs: [(hash: Hash32, bytes: [UInt8])], frames: Int) = ([], 0)
    var blobTask: Task<Void, Never>? = nil
    var blobError: (any Error)? = nil
}

/// Where a sync session's announcements started and where the peer's ended.
struct SessionPositions {
    /// The session tag and the position this side announced from (Specs/sync.md §4.7).
    var startTag: Hash32 = .zero
    var startSince: UInt64 = 0
    /// The feeds of the last round, for the tag remembered at the end.
    var finalFeeds: Set<PublicKey>? = nil
    /// The peer's log position its `done` named.
    var peerDone: UInt64 = 0
    /// This side's position and accepted count when it announced.
    var announcedSnapshot: (position: UInt64, accepted: Int)? = nil
}

/// The scopes of a session (Specs/sync.md §4.10): the feeds this side told
/// the peer it wants (nil when it sends no scope), and the feeds the peer
/// told this side (nil when the peer sends none: then nothing is held back).
struct ScopeExchange {
    var sent: Set<PublicKey>? = nil
    var expectsPeer = false
    var peer: Set<PublicKey>? = nil
    /// The peer's scope list being received, until its end.
    var peerPending: [PublicKey] = []
}

/// A listed relay's verdicts in a session (Specs/sync.md §8.1): feeds it
/// keeps whole, and feeds it stopped keeping at an event of a kind a
/// directory feed does not hold.
struct HostingVerdicts {
    var hosted: Set<PublicKey> = []
    var notHosted: Set<PublicKey> = []
}
