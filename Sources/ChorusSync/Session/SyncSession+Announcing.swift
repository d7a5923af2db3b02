import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusParallel
import Foundation

/// Announcing this node's feeds: the heads changed since the peer's
/// position, or those reconciliation finds to differ (Specs/sync.md §4.2),
/// and in live mode the heads of every commit (§4.6).
extension SyncSession {
    enum Reconciliation: Sendable { case none, tree, sketch }
    enum ReconcileInput: Sendable { case round(ReconcileRound), info(SketchInfo), sums(SketchSums), result(SketchResult) }

    // MARK: Announcing

    func announceLoop(live: Bool) async throws {
        guard let hello = peerHello else { return }
        // A scoped peer's feeds first (§4.10): every announcement is limited to them.
        if scopes.expectsPeer { await peerScopeReceived() }
        var invitation: [PublicKey] = []
        if hello.hops != nil, hello.capabilities.contains(.invitations) {
            invitation = try ReplicationScope.invitation(for: hello.user, at: node)
            for chunk in invitation.chunked(SyncLimits.listBatch) { send(.invite(chunk)) }
        }
        let invited = Set(invitation)
        // Live announcing wakes by what changed (Specs/storage.md §8): the
        // reads of the heads of the feeds the peer may be announced are
        // recorded, and only a commit that writes one of them wakes it, so
        // a relay's live sessions of scoped peers cost what their peers
        // want, not every commit. Recorded before the position is read, so
        // nothing slips between.
        let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let observation = live ? node.log.env.regionObservers.open { wake.yield() } : nil
        defer {
            observation?.close()
            wake.finish()
        }
        var watched: Set<PublicKey>? = nil
        func watch() throws {
            guard let observation else { return }
            let feeds = scopes.peer.map { $0.union(invited) }
            try observation.watching {
                if let feeds { for feed in feeds { _ = try node.head(of: feed) } } else { _ = try node.lastArrival() }
            }
            watched = feeds
        }
        try watch()
        if live { liveWake = wake }
        // Only the announcement without reconciliation filters by it (a
        // directory session is never live); `reconcileHeads` reads its own.
        let directory = directorySession && reconcile.mode == .none ? try FeedHosting.directoryFeeds(at: node) : nil
        func allowed(_ heads: [FeedAnnouncement]) -> [FeedAnnouncement] {
            if let directory { return heads.filter { directory.contains($0.author) } }
            guard let scope = scopes.peer else { return heads }
            return heads.filter { scope.contains($0.author) || invited.contains($0.author) }
        }
        var position = try node.lastArrival()
        positions.announcedSnapshot = (position, report.eventsReceived)
        if reconcile.mode != .none {
            try await reconcileHeads()
            if let scope = scopes.peer {
                // Invited feeds outside the scope are not reconciled: announced as they are.
                for chunk in try heads(of: invitation.filter { !scope.contains($0) }).chunked(SyncLimits.listBatch) { send(.have(chunk)) }
            }
        } else {
            var heads = allowed(try changedHeads(since: hello.since, upTo: position, initial: true))
            if hello.since > 0, !invitation.isEmpty {
                // The peer's remembered position predates the invitation: its
                // invited feeds are announced whether or not they changed since.
                let listed = Set(heads.map(\.author))
                heads += try self.heads(of: invitation.filter { !listed.contains($0) })
            }
            for chunk in heads.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
        }
        send(.haveEnd(position: position))
        guard live else { return }
        for await _ in wakes {
            report.liveWakes += 1
            // A scope that grew is watched whole from now on; what arrived
            // meanwhile is in the arrivals since `position`.
            if scopes.peer.map({ $0.union(invited) }) != watched { try watch() }
            let now = try node.lastArrival()
            guard now > position else { continue }
            let changed = allowed(try changedHeads(since: position, upTo: now, initial: false))
            position = now
            let fresh = peerHeads.lacking(changed)
            guard !fresh.isEmpty else { continue }
            for a in fresh { peerHeads.note(a.author, holds: a.seq) }
            for chunk in fresh.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
            send(.haveEnd(position: now))
        }
    }

    /// Announces the feeds the peer holds differently (Specs/sync.md
    /// §4.2.1–4.2.2) instead of every feed: by sketch, falling back to the
    /// tree (or, without it, to every feed). Live mode needs no
    /// reconciliation: it announces only what arrives after.
    func reconcileHeads() async throws {
        // With one side scoped, both reconcile the scoped side's feeds only
        // (§4.10), read one by one: a relay's cost is its peer's scope, not
        // every feed it holds.
        var heads: [FeedAnnouncement]
        if let scope = scopes.peer ?? scopes.sent {
            heads = try self.heads(of: Array(scope))
        } else {
            heads = try node.heads().map { FeedAnnouncement(author: $0.author, seq: $0.head.seq, head: $0.head.id) }
        }
        // A directory session reconciles user keys' own feeds only (§4.12).
        if directorySession {
            let directory = try FeedHosting.directoryFeeds(at: node)
            heads = heads.filter { directory.contains($0.author) }
        }
        var settled = false
        if reconcile.mode == .sketch { settled = try await sketchHeads(heads) }
        if !settled {
            if peerHello?.capabilities.contains(.reconcile) == true, options.reconcile {
                reconcile.mode = .tree
                try await treeHeads(heads)
            } else {
                for chunk in heads.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
            }
        }
        // The peer ends in the same round; one more from it is out of step.
        reconcile.finished = true
        if !reconcile.inputs.isEmpty { throw SyncError.unexpected("a reconciliation message after the reconciliation ended") }
    }

    /// Range-based reconciliation, round by round (§4.2.1).
    func treeHeads(_ heads: [FeedAnnouncement]) async throws {
        var reconciler = Reconciler(heads: heads)
        send(.reconcile(reconciler.firstRound()))
        report.reconcileRounds += 1
        while true {
            guard let input = await reconcile.inputs.next() else { throw SyncError.connectionClosed }
            guard case .round(let peerRound) = input else { throw SyncError.unexpected("\(input) during a reconcile round") }
            let (announce, next) = try reconciler.receive(peerRound)
            for chunk in announce.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
            guard let next else { break }
            report.reconcileRounds += 1
            send(.reconcile(next))
        }
    }

    /// Sketch reconciliation (§4.2.2). Returns false when both sides fall
    /// back. The decoder queues its push and records the heights it lacks;
    /// the sketcher announces the feeds the decoder asks for.
    func sketchHeads(_ heads: [FeedAnnouncement]) async throws -> Bool {
        var sketch = SketchReconciler(
            heads: heads, nonce: Random.bytes(SketchReconciler.nonceBytes), device: node.identity.device.raw, peerDevice: transport.peer.key)
        send(.sketchInfo(sketch.info()))
        report.reconcileRounds = 1
        func next() async throws -> ReconcileInput {
            guard let input = await reconcile.inputs.next() else { throw SyncError.connectionClosed }
            return input
        }
        guard case .info(let peerInfo) = try await next() else { throw SyncError.unexpected("a sketch message before the peer's sketchInfo") }
        switch sketch.start(peer: peerInfo) {
        case .identical:
            report.sketched = true
            return true
        case .fallBack:
            return false
        case .sketch(nil):
            send(.sketchResult(SketchResult(outcome: .giveUp)))
            return false
        case .sketch(let sums?):
            reconcile.sketchRole = .sketcher
            send(.sketch(sums))
            while true {
                guard case .result(let result) = try await next() else { throw SyncError.unexpected("sketch sums to the sketcher") }
                switch try sketch.receive(result) {
                case .next(let more):
                    report.reconcileRounds += 1
                    send(.sketch(more))
                case .found(let announce, _):
                    for chunk in announce.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
                    report.sketched = true
                    return true
                case .giveUp:
                    return false
                }
            }
        case .decode:
            reconcile.sketchRole = .decoder
            while true {
                let step: SketchReconciler.DecoderStep
                switch try await next() {
                case .sums(let sums): step = try sketch.receive(sums, store: node)
                case .result(let result):
                    _ = try sketch.receive(result)  // only "give up" reaches a decoder
                    return false
                default: throw SyncError.unexpected("a reconcile round during a sketch reconciliation")
                }
                switch step {
                case .reply(let result):
                    send(.sketchResult(result))
                    if result.outcome == .giveUp { return false }
                    report.reconcileRounds += 1
                case .found(let result, let plan):
                    fetch.learned(plan.wants)
                    for w in plan.wants { peerHeads.note(w.author, holds: w.seq) }
                    send(.sketchResult(result))
                    if !plan.pushes.isEmpty {
                        try queue(.push(try bindersFirst(plan.pushes)), items: plan.pushes.count)
                        try queue(.pushEnd, items: 1)
                    }
                    report.sketched = true
                    return true
                }
            }
        }
    }

    /// Heads of the feeds that received events after arrival position
    /// `since` (every feed when `since` is 0 or far behind).
    func changedHeads(since: UInt64, upTo position: UInt64, initial: Bool) throws -> [FeedAnnouncement] {
        if since == 0 || since > position || position - since > 50_000 {
            return try node.heads().map { FeedAnnouncement(author: $0.author, seq: $0.head.seq, head: $0.head.id) }
        }
        // Only who wrote: the headers, not the payloads or their schemas.
        var authors: Set<PublicKey> = []
        var from = since
        while true {
            let page = try node.log.authorsArrived(since: from, limit: 4096)
            authors.formUnion(page.authors)
            guard page.read == 4096 else { break }
            from = page.last
        }
        return try heads(of: authors.sorted())
    }

    /// The heads of those of `authors` whose feeds this node holds, in that order.
    func heads(of authors: [PublicKey]) throws -> [FeedAnnouncement] {
        try authors.compactMap { a in try node.head(of: a).map { FeedAnnouncement(author: a, seq: $0.seq, head: $0.id) } }
    }

    // MARK: The peer's scope (Specs/sync.md §4.10)

    /// Returns once the peer's first scope list has ended (or the session has).
    func peerScopeReceived() async {
        if scopes.peer != nil { return }
        await peerScopeArrived.wait()
    }

    /// A scope list ended: the first is the peer's scope, which releases the
    /// announcements; a later one adds feeds, answered with the heads of
    /// those this node holds and `scopeAnswered`.
    func receivedScope() throws {
        let feeds = Set(scopes.peerPending)
        scopes.peerPending = []
        guard let scope = scopes.peer else {
            scopes.peer = feeds
            peerScopeArrived.open()
            return
        }
        let added = feeds.subtracting(scope)
        scopes.peer = scope.union(added)
        if !added.isEmpty { liveWake?.yield() }  // live announcing watches the added feeds too
        let heads = try heads(of: added.sorted())
        for h in heads { peerHeads.note(h.author, holds: h.seq) }
        for chunk in heads.chunked(SyncLimits.listBatch) { send(.have(chunk)) }
        send(.scopeAnswered)
    }

    // MARK: The peer's reconciliation messages

    func reconcileInput(_ input: ReconcileInput, _ what: String) throws {
        guard reconcile.admits(input) else { throw SyncError.unexpected("\(what) outside a reconciliation") }
        reconcile.inputs.push(input)
    }
}
