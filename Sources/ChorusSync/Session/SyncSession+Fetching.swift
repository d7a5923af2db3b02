import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusParallel
import Foundation

/// Asking for what this node lacks, round by round, then recording the peer
/// (Specs/sync.md §4.3–4.5, §4.7); the decisions are `FetchState`'s.
extension SyncSession {
    // MARK: Fetching

    func fetchLoop() async throws {
        var firstRound = true
        while let signal = await signals.next() {
            if case .pushEnd = signal { continue }  // the push ended before the peer's announcement
            guard case .announced(let position) = signal else { throw SyncError.unexpected("\(signal) before any request") }
            // Events the peer pushes settle what this round asks for.
            if fetch.pushOpen { try await expect("the end of the pushed events") { if case .pushEnd = $0 { true } else { false } } }
            fetch.startRound()
            var feeds = try scopeFeeds()
            var asked: [PublicKey: UInt64] = [:]
            while true {
                // A peer that announces only this side's scope learns what it
                // grew by (§4.10), however it grew: by the events of this sync session,
                // or by notices a parallel session took (§4.11).
                if let sent = scopes.sent, let feeds, case let added = feeds.subtracting(sent), !added.isEmpty {
                    scopes.sent = sent.union(added)
                    for chunk in added.sorted().chunked(SyncLimits.listBatch) { send(.scope(chunk)) }
                    send(.scopeEnd)
                    try await expect("the peer's heads of the feeds added to the scope") { if case .scopeAnswered = $0 { true } else { false } }
                }
                let wants = try fetch.wants(in: feeds, asked: &asked, store: node)
                if !wants.isEmpty {
                    report.eventsRequested += wants.reduce(0) { $0 + Int($1.to - $1.from + 1) }
                    reportProgress()
                    for chunk in wants.chunked(SyncLimits.listBatch) { send(.want(chunk)) }
                    send(.wantEnd)
                    try await expect("events end") { if case .eventsEnd = $0 { true } else { false } }
                }
                // The scope may have grown without a request of this sync session:
                // notices taken by a parallel session add their senders (§4.11).
                guard feeds != nil else { break }
                let grown = try scopeFeeds()
                if grown == feeds { break }
                feeds = grown
            }
            try await refillPayloads()
            if options.blobs, peerHello?.capabilities.contains(.blobs) == true {
                let blobs = self.blobs
                let missing = blobFetch.request(try await offThePool { try blobs.missing() })
                if !missing.isEmpty {
                    report.blobsRequested += missing.count
                    reportProgress()
                    for chunk in missing.chunked(SyncLimits.listBatch) { send(.blobWant(chunk)) }
                    send(.blobWantEnd)
                    try await expect("blob end") { if case .blobEnd = $0 { true } else { false } }
                }
            }
            fetch.endRound()
            // Keys this device holds, wrapped to member devices that the
            // events just received made known or entitled: before `done`, so
            // the peer's next session finds them, and in live mode announced
            // at once (Specs/encryption.md §6 rule 5).
            if !keyTriggers.isEmpty {
                let triggers = keyTriggers
                keyTriggers = ChatKeyTriggers()
                do {
                    report.keyEventsWritten += try await node.shareChatKeys(concerning: triggers)
                } catch {
                    // Kept for the pass after the session (`run`), which
                    // reports what still fails.
                    keyTriggers.merge(triggers)
                }
            }
            if firstRound {
                firstRound = false
                ending.saidDone()
                positions.finalFeeds = feeds
                report.partial = fetch.sessionIncomplete
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
    func refillPayloads() async throws {
        guard options.refill, peerHello?.capabilities.contains(.refill) == true else { return }
        if let checked = refillCheckedAt, checked == report.eventsReceived { return }
        refillCheckedAt = report.eventsReceived
        let projections = node.projections
        let held = try await offThePool { try projections.eventsMissingPayload(limit: SyncLimits.maxRefill) }
        let ids = fetch.refills(among: held)
        guard !ids.isEmpty else { return }
        for chunk in ids.chunked(SyncLimits.listBatch) { send(.payloadWant(chunk)) }
        send(.payloadWantEnd)
        try await expect("events end after payload wants") { if case .eventsEnd = $0 { true } else { false } }
        fetch.refillsAnswered()
    }

    func expect(_ wanted: String, _ matches: (FetchSignal) -> Bool) async throws {
        idleWatch.fetchWaiting = true
        defer { idleWatch.fetchWaiting = false }
        // A live announcement (the peer committed meanwhile) may arrive in
        // the middle of a round: it waits for the next round.
        var deferred: [FetchSignal] = []
        defer { signals.pushFront(deferred) }
        while true {
            guard let s = await signals.next() else { throw CancellationError() }
            if matches(s) { return }
            guard case .announced = s else { throw SyncError.unexpected("\(s) while waiting for \(wanted)") }
            deferred.append(s)
        }
    }

    /// The feeds in scope now, with those the peer invited this node to.
    /// A listed relay's "scope" is what it hosts of the announced feeds
    /// (Specs/sync.md §8.1), which grows as the relay lists naming it arrive.
    func scopeFeeds() throws -> Set<PublicKey>? {
        // In a directory session every announced feed is a user key's own
        // feed, kept as the directory (§4.12, §8.1 rule 2) when not hosted whole.
        if directorySession { return Set(fetch.announced.keys) }
        if options.hostsListed {
            let peerUser = peerHello?.user
            return Set(try fetch.announced.keys.filter { try FeedHosting.level(of: $0, at: node, peerUser: peerUser) != .none })
        }
        return try options.scope.feeds(of: node)?.union(fetch.invited)
    }

    /// The position to send in "done": the current arrival position when
    /// every arrival since the announced snapshot came from this peer (so
    /// the peer never hears back about its own events), else the snapshot.
    func donePosition() throws -> UInt64 {
        guard let snapshot = positions.announcedSnapshot else { return 0 }
        let now = try node.lastArrival()
        if now >= snapshot.position, now - snapshot.position == UInt64(report.eventsReceived - snapshot.accepted) { return now }
        return snapshot.position
    }

    /// Records what the peer announced, so the next sync asks only for
    /// feeds that changed since (request skipping).
    func remember(position: UInt64, final: Bool = true) throws {
        guard let peers else { return }
        let complete = !fetch.sessionIncomplete
        let tag = try sessionTag(positions.finalFeeds, peerUser: peerHello?.user)
        let user = peerHello?.user
        let received = UInt64(report.eventsReceived)
        let sentCount = UInt64(report.eventsSent)
        // A scope that grew during a session that skipped unchanged feeds
        // may miss feeds the peer did not announce: ask for all next time.
        let forceFull = positions.startSince > 0 && tag != positions.startTag
        // A directory session's position covers the directory only: it is
        // never the peer's position for a whole session (§4.12).
        let keepsPosition = !directorySession
        let blobSerial = blobFetch.peerSerial
        let lacked = blobFetch.lacked
        do {
            try peers.update(transport.peer.key, address: transport.peer.address) { r in
                if !keepsPosition {
                    // Unchanged.
                } else if forceFull {
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
}
