import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode

/// What the fetcher reads of its own store to decide what to ask for.
package protocol FeedLookup {
    /// The head (height and id) of `author`'s feed in this store, or nil when
    /// it holds none of its events.
    func head(of author: PublicKey) throws -> FeedHead?
    /// The id of `author`'s event at `seq`, if held.
    func eventID(of author: PublicKey, at seq: UInt64) throws -> EventID?
}

extension Node: FeedLookup {
    /// Reads `author`'s event at `seq` from this node's log: its id, or nil
    /// when the feed does not hold that event.
    package nonisolated func eventID(of author: PublicKey, at seq: UInt64) throws -> EventID? {
        guard let e = try feed(author, fromSeq: seq, limit: 1).first?.event, e.seq == seq else { return nil }
        return e.id
    }
}

/// The fetcher's side of a session (Specs/sync.md §4.2–4.3, §4.7–4.8): what
/// the peer announced, which ranges were asked for, and whether a received
/// event fits them. Pure state: the session feeds it messages and ingest
/// results and sends what it decides.
package struct FetchState: Sendable {
    /// The peer's heads as announced, by author.
    package private(set) var announced: [PublicKey: FeedAnnouncement] = [:]
    private var incoming: [FeedAnnouncement] = []
    /// Ranges requested and not yet fully received: next expected seq, last
    /// seq, and the seq of a fork-evidence answer the server may send instead.
    private var expected: [PublicKey: (next: UInt64, to: UInt64, forkSeq: UInt64?)] = [:]
    /// Feeds whose events wait for this node's clock (§4.3): not asked again this round.
    private var transientAuthors: Set<PublicKey> = []
    /// Feeds the peer said concern this node's user (`invite`, §4.8).
    package private(set) var invited: Set<PublicKey> = []
    /// Whether the peer is pushing events unasked after a sketch
    /// reconciliation it decoded (Specs/sync.md §4.2.2), until `eventsEnd`.
    package private(set) var pushOpen = false
    private enum PushedFeed { case next(UInt64), ended, dropping }
    /// Per pushed feed: the next seq expected, or the push ended (fork
    /// evidence), or it is being dropped (it did not extend this node's head).
    private var pushed: [PublicKey: PushedFeed] = [:]
    private var payloadsWanted: Set<EventID> = []
    private var payloadsAsked: Set<EventID> = []
    /// The current round lacks something (§4.5); then the session does too.
    package var roundIncomplete = false
    /// Some round of this session was incomplete (set by `endRound()`), so the
    /// session is partial and the peer's position is not advanced
    /// (Specs/sync.md §4.3, §4.5).
    package private(set) var sessionIncomplete = false

    /// An empty state for a new session: nothing announced, requested or
    /// invited yet.
    package init() {}

    /// Collects the entries of one `have` message until `haveEnd`. Throws
    /// `SyncError.unexpected` once one round's announcements exceed 10 million
    /// (Specs/sync.md §5).
    package mutating func have(_ list: [FeedAnnouncement]) throws(SyncError) {
        incoming += list
        if incoming.count > 10_000_000 { throw .unexpected("over 10 million feed announcements in one round") }
    }

    /// Ends an announcement: returns the heads it held.
    package mutating func haveEnd() -> [FeedAnnouncement] {
        let list = incoming
        for a in list { announced[a.author] = a }
        incoming = []
        return list
    }

    /// Adds the feeds of an `invite` message to this session's scope
    /// (Specs/sync.md §4.8). `scoped` says whether this node replicates a
    /// limited scope and offered `invitations`; when it does not, or past
    /// `SyncLimits.maxInvitedFeeds` feeds in one session, this throws
    /// `SyncError.unexpected`.
    package mutating func invite(_ feeds: [PublicKey], scoped: Bool) throws(SyncError) {
        guard scoped else { throw .unexpected("an invite to a node that replicates every feed or did not offer invitations") }
        invited.formUnion(feeds)
        if invited.count > SyncLimits.maxInvitedFeeds { throw .unexpected("invited to over \(SyncLimits.maxInvitedFeeds) feeds") }
    }

    /// Starts a round of requests: clears `roundIncomplete`.
    package mutating func startRound() { roundIncomplete = false }

    /// Heads the sketch decoder learned (Specs/sync.md §4.2.2): requested in
    /// the next round like announced ones.
    package mutating func learned(_ heads: [FeedAnnouncement]) {
        for h in heads { announced[h.author] = h }
    }

    /// The peer said it pushes events next.
    package mutating func openPush() {
        pushOpen = true
        pushed = [:]
    }

    /// The pushed events ended (`eventsEnd`).
    package mutating func closePush() { pushOpen = false }

    /// Ends a round of requests: an incomplete round marks the whole session
    /// incomplete (`sessionIncomplete`).
    package mutating func endRound() { if roundIncomplete { sessionIncomplete = true } }

    /// Ranges of announced feeds in `feeds` (nil: every feed) that `store`
    /// lacks, not yet asked for in this round (`asked`); records them as
    /// expected. Equal heights with different heads ask for that one
    /// position: the peer's event there is fork evidence.
    package mutating func wants(in feeds: Set<PublicKey>?, asked: inout [PublicKey: UInt64], store: some FeedLookup) throws -> [FeedRange] {
        var out: [FeedRange] = []
        for (author, a) in announced.sorted(by: { $0.key < $1.key }) {
            if let feeds, !feeds.contains(author) { continue }
            if let done = asked[author], done >= a.seq { continue }
            if transientAuthors.contains(author) { continue }
            let head = try store.head(of: author)
            let have = head?.seq ?? 0
            if have >= a.seq {
                if have == a.seq, let head, head.id != a.head {
                    let before = a.seq > 1 ? try store.eventID(of: author, at: a.seq - 1) : nil
                    out.append(FeedRange(author: author, from: a.seq, prev: before, to: a.seq))
                    asked[author] = a.seq
                }
                continue
            }
            out.append(FeedRange(author: author, from: have + 1, prev: head?.id, to: a.seq))
            asked[author] = a.seq
        }
        for w in out { expected[w.author] = (w.from, w.to, w.prev == nil ? nil : w.from - 1) }
        return out
    }

    /// Payload refills to ask for (§4.7): each event once per session.
    package mutating func refills(among missing: [EventID]) -> [EventID] {
        let ids = missing.filter { !payloadsAsked.contains($0) }
        payloadsAsked.formUnion(ids)
        payloadsWanted.formUnion(ids)
        return ids
    }

    /// The peer answered the refill request: it lacks the rest.
    package mutating func refillsAnswered() { payloadsWanted = [] }

    /// What a received event is to the fetcher.
    package enum Received: Equatable, Sendable {
        /// The next event of a requested range, or of a feed being pushed.
        case event
        /// A requested refill (§4.7).
        case refill
        /// A pushed event that does not extend this node's feed: not
        /// stored; the next round asks for the peer's event at this node's
        /// height instead, which settles the fork (§4.2.2).
        case skipped
    }

    /// Whether requested events have still to arrive: a range asked for is
    /// open, or pushed events may come.
    package var awaitsRequestedEvents: Bool { !expected.isEmpty || pushOpen }

    /// Classifies a received event; anything unrequested ends the session.
    package mutating func accept(_ event: Event, store: some FeedLookup) throws -> Received {
        if payloadsWanted.remove(event.id) != nil { return .refill }
        guard var range = expected[event.author] else {
            guard pushOpen else { throw SyncError.unrequestedEvent("\(event.author.short)#\(event.seq)") }
            return try acceptPushed(event, store: store)
        }
        if event.seq == range.next {
            range.next += 1
            if range.next > range.to { expected.removeValue(forKey: event.author) } else { expected[event.author] = range }
        } else if let fork = range.forkSeq, event.seq == fork, range.next == fork + 1 {
            expected.removeValue(forKey: event.author)  // the server's answer: its different event there
        } else {
            throw SyncError.unrequestedEvent("\(event.author.short)#\(event.seq), expected #\(range.next)")
        }
        return .event
    }

    /// A pushed feed starts right after this node's head (and continues in
    /// order) or is one event at this node's height (fork evidence).
    mutating func acceptPushed(_ event: Event, store: some FeedLookup) throws -> Received {
        let author = event.author
        switch pushed[author] {
        case .next(let next):
            guard event.seq == next else { throw SyncError.unrequestedEvent("\(author.short)#\(event.seq), expected #\(next)") }
            pushed[author] = .next(next + 1)
            return .event
        case .dropping: return .skipped
        case .ended: throw SyncError.unrequestedEvent("\(author.short)#\(event.seq) after its fork evidence")
        case nil: break
        }
        let head = try store.head(of: author)
        let height = head?.seq ?? 0
        if event.seq == height + 1 {
            guard event.header.prev == head?.id else {
                pushed[author] = .dropping
                announced[author] = FeedAnnouncement(author: author, seq: height, head: .zero)
                return .skipped
            }
            pushed[author] = .next(height + 2)
            return .event
        }
        guard height > 0, event.seq == height else { throw SyncError.unrequestedEvent("\(author.short)#\(event.seq) pushed, this node holds #\(height)") }
        pushed[author] = .ended
        return .event
    }

    /// `eventsEnd`: ranges still open mean the peer sent less than it
    /// announced, not an attack one can prove, but the round is incomplete.
    package mutating func eventsEnd() {
        if !expected.isEmpty {
            expected = [:]
            roundIncomplete = true
        }
    }

    /// Applies one ingest result of a received event to the report; throws
    /// for a refusal that ends the session (§4.3).
    package mutating func ingested(_ event: Event, _ result: IngestResult, refill: Bool, report: inout SyncReport) throws(SyncError) {
        switch result {
        case .accepted:
            report.eventsReceived += 1
        case .duplicate:
            // A refill is stored as a duplicate whose payload comes back.
            if refill { report.payloadsRefilled += 1 } else { report.duplicatesReceived += 1 }
        case .refused(let e):
            switch e {
            case .fork:
                report.forksSeen += 1  // the log keeps the evidence
            case .timestampInFuture:
                transientAuthors.insert(event.author)
                roundIncomplete = true
            case .sequenceGap where transientAuthors.contains(event.author):
                break  // an earlier event of this feed waits for our clock
            default:
                throw .badEvent(code: e.code, detail: "\(event.author.short)#\(event.seq): \(e.description)")
            }
        case .notStored(let why):
            throw .local("could not store received events: \(why)")
        case .withheld:
            roundIncomplete = true
        }
    }
}
