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
    // MARK: Announcing

    func announceLoop(live: Bool) async throws {
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
    func reconcileHeads() async throws {
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
    func changedHeads(since: UInt64, upTo position: UInt64, initial: Bool) throws -> [FeedAnnouncement] {
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
}
