import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusProjections
import Dispatch
import Foundation
import Synchronization

/// Something `verify` (or an audit) found wrong, with where it is.
public struct Finding: Error, Hashable, Sendable {
    /// A stable code: `undecodable`, `wrong_id`, `bad_signature`, `feed`,
    /// `fork`, `bad_fork_evidence`, `blob_damaged`, `projection_differs`,
    /// `projections_stale`, `epoch_unknown`.
    public let code: String
    public let message: String
    /// The event concerned, when there is one.
    public let event: EventID?
    /// Where in the store: a database and key, or a feed position.
    public let location: String
}

public struct VerifyReport: Sendable {
    public var events = 0
    public var perKind: [String: Int] = [:]
    /// Events whose payload is purged (by kind): reported, not damage.
    public var purged: [String: Int] = [:]
    public var feeds = 0
    public var forks = 0
    public var blobs = 0
    /// Whether the live projections equal those folded from the log,
    /// entry by entry (every difference is a `projection_differs`
    /// finding); nil when they were not compared (`projections_stale`).
    public var projectionsMatch: Bool? = nil
    /// The live projections' digest (Specs/projections.md §8), when asked
    /// for and compared.
    public var liveDigest: Hash32? = nil
    /// The digest of the projections folded from the log, when asked for.
    public var rebuiltDigest: Hash32? = nil
    public var findings: [Finding] = []

    public var isClean: Bool { findings.isEmpty }
}

extension ReplayStore {
    /// Checks every stored event (canonical encoding, id, payload hash where
    /// present, schema, signature), every feed (positions, chain, clock,
    /// heads, arrival log), fork evidence and blobs, then folds the log into
    /// fresh projections in a scratch store and compares them with the live
    /// ones entry by entry.
    ///
    /// With `digests`, the report also holds both projection digests
    /// (§8), to compare with other replicas'. The entry-by-entry
    /// comparison does not need them, and they cost a pass over the state
    /// that expands every message from the log again (about a tenth of
    /// what the rest of `verify` costs).
    public func verify(
        digests: Bool = false, progress: ((_ stage: String, _ done: Int, _ total: Int) -> Void)? = nil
    ) throws -> VerifyReport {
        var report = VerifyReport()
        let total = try log.eventCount()
        // Stale live projections (another format, or another network
        // configuration) hold records this version would misread: they are
        // reported, not compared, and step 5 asks the rebuilt ones instead.
        let stale = try projections.staleness()
        if let stale {
            report.findings.append(
                Finding(
                    code: "projections_stale",
                    message: "the live projections \(stale), so they were not compared with the log; a node rebuilds them when it opens the store (then verify again)",
                    event: nil, location: "index[built]"))
        }

        // 6 (begun first). The store is copied as stored (page for page,
        // or the log's tables one by one if a node commits meanwhile) to a
        // scratch store, whose projections are folded from scratch while
        // steps 1–5 check the live store: the fold needs none of their
        // results unless they find damage (below). This runs on another
        // thread: the checks below need none of it, and starting them at
        // once keeps both cores busy from the start.
        // The copy takes the data file up to its last page in use (the
        // whole environment, page for page: `copyLog(whole:)`).
        let scratch = try ScratchDirectory(room: env.usedBytes + (64 << 20))
        defer { withExtendedLifetime(scratch) {} }  // removed only once the copies are no longer read
        let folded = ProgressCount()
        let folding = Background { [self] in
            // The live projections are compared in the snapshot copied, so
            // events a node appends meanwhile change neither; the snapshot
            // is held until the fold of the copy is done (`liveDigest`).
            let (copy, folding) = try copyLog(to: scratch.path + "/tables", whole: true) {
                snapshot, copy -> FoldOutcome in
                let rebuilt = Result { () throws -> Hash32? in
                    try copy.store.rebuild(progress: { done, _ in folded.set(done) })
                    // Not split into batches (`digestInParts`): the checks
                    // keep the other core busy, so the split would only add
                    // its own overhead.
                    return digests ? try copy.env.read { try copy.projections.digest(in: $0) } : nil
                }
                guard stale == nil else { return FoldOutcome(rebuilt: rebuilt) }
                // Compared only with a fold that completed.
                var foldedDigest: Hash32? = nil
                var same = false
                if case .success(let digest) = rebuilt {
                    foldedDigest = digest
                    same = try storesSameState(in: snapshot, as: copy)
                }
                let live = digests ? try liveDigest(in: snapshot, storedSame: same, folded: foldedDigest) : nil
                return FoldOutcome(rebuilt: rebuilt, storedSame: same, live: live)
            }
            // Live projections equal to the fold need nothing more of the
            // copy: it is closed and removed here, while the checks below
            // still run, not after them (a gigabyte's pages to unmap and
            // free). A log found damaged is copied again anyway.
            if folding.storedSame == true {
                copy.env.close()
                try? FileManager.default.removeItem(atPath: scratch.path + "/tables")
                return (copy: ReplayStore?.none, outcome: folding)
            }
            return (copy: ReplayStore?.some(copy), outcome: folding)
        }
        // 3.–4. Fork evidence and blobs, on another thread.
        let checks = Background { [self] in try self.storeChecks() }

        // 1. Every record: decode strictly and verify the signature, on all
        // cores. Tolerant: damage must not stop the comparison. 2. The feeds
        // (`FeedAudit`) and 5. chat encryption (`EncryptionAudit`) are
        // checked from the same pass.
        var feeds = FeedAudit()
        var encryption = EncryptionAudit(stale == nil ? projections : nil)
        var kinds = KindTally()
        do {
            try pipelined(from: UInt64(0)) { since in
                try rawSlice(since: since) { record -> (event: CheckedEvent?, finding: Finding?) in
                    // Locations are spelled out only for findings (`EventPlace`).
                    let event: Event
                    do { event = try LogStore.decodeEnvelope(record.bytes, arrival: record.arrival) } catch {
                        return (nil, Finding(code: "undecodable", message: "\(error)", event: nil, location: "envelopes[\(record.arrival)]"))
                    }
                    let checked = CheckedEvent(event)
                    guard event.verifySignature() else {
                        return (
                            checked,
                            Finding(
                                code: "bad_signature", message: "the signature does not verify for author \(event.author.hex)",
                                event: event.id, location: EventPlace(record.arrival, checked.link).location)
                        )
                    }
                    return (checked, nil)
                }
            } consume: { slice in
                for i in slice.indices {
                    let arrival = slice[i].arrival
                    report.events += 1
                    if let finding = slice[i].item.finding { report.findings.append(finding) }
                    guard let event = slice[i].item.event else {
                        feeds.unreadable(arrival: arrival)
                        continue
                    }
                    feeds.observe(event.link, arrival: arrival)
                    try encryption.observe(event, arrival: arrival)
                    guard slice[i].item.finding == nil else { continue }
                    kinds.add(event.kind, purged: event.purged)
                }
                progress?("events", report.events, total)
            }
        } catch {
            _ = try? checks.wait()  // nothing reads the stores after this returns
            _ = try? folding.wait()
            throw error
        }
        kinds.add(to: &report.perKind, purged: &report.purged)
        let checked: VerifyReport
        do {
            for problem in try feeds.finish(log) {
                report.findings.append(Finding(code: "feed", message: problem, event: nil, location: "feeds"))
            }
            checked = try checks.wait()
        } catch {
            _ = try? checks.wait()
            _ = try? folding.wait()
            throw error
        }
        report.feeds = checked.feeds
        report.forks = checked.forks
        report.blobs = checked.blobs
        report.findings += checked.findings

        // 6. The projections folded from the log. A log whose records cannot
        // all be read, or do not all fit their feeds, is copied again event
        // by event, leaving out what cannot be read or does not fit, as a
        // node would never have stored it: the comparison then shows what
        // the damage changed.
        let (copy, outcome) = try folding.wait(tickingEvery: 0.2) { progress?("rebuild", folded.value, total) }
        report.liveDigest = outcome.live
        if stale != nil, case .success = outcome.rebuilt, let copy { try encryption.finish(against: copy.projections) }
        report.findings += encryption.findings
        // The projections to compare with, and whether they are known to
        // equal the live ones (stored the same, at the same positions).
        let rebuilt: ReplayStore?
        var knownSame: Bool
        if report.findings.contains(where: { Self.damageToTheLog.contains($0.code) }) {
            let again = try self.copy(
                to: scratch.path + "/events", tolerant: true, progress: { done, total in progress?("rebuild", done, total) })
            if digests { report.rebuiltDigest = try again.projections.digest() }
            rebuilt = again
            knownSame = false
        } else {
            report.rebuiltDigest = try outcome.rebuilt.get()
            rebuilt = copy
            knownSame = outcome.storedSame == true
        }
        guard stale == nil else { return report }
        if !knownSame, let rebuilt {
            // Stored differently (or at other positions) may still be the
            // same state: only the entries of §5 that differ are findings.
            let differences = try StateDiff.between(self, rebuilt)
            for d in differences {
                report.findings.append(
                    Finding(
                        code: "projection_differs",
                        message: "\(d.description): live \(d.left.map(Hex.encode) ?? "absent"), from the log \(d.right.map(Hex.encode) ?? "absent")",
                        event: nil, location: "state[\(Hex.encode(d.key))]"))
            }
            knownSame = differences.isEmpty
        }
        report.projectionsMatch = knownSame
        return report
    }

    /// What `verify`'s fold of the copied log found: the fold's digest
    /// (when asked for) or why it failed, and, when the live projections
    /// were compared, whether they are stored the same and their digest.
    struct FoldOutcome: Sendable {
        var rebuilt: Result<Hash32?, any Error>
        var storedSame: Bool? = nil
        var live: Hash32? = nil
    }

    /// Findings after which the log, copied as stored, is not what a fold
    /// from its readable events would see.
    static let damageToTheLog: Set<String> = ["undecodable", "wrong_id", "feed", "bad_fork_evidence"]

    /// Steps 3 and 4 of `verify`: fork evidence and blobs, as a partial
    /// report (feeds, forks, blobs, findings).
    func storeChecks() throws -> VerifyReport {
        var partial = VerifyReport()
        partial.feeds = try log.allHeads().count

        // 3. Fork evidence: each refused event is validly signed and really conflicts.
        for fork in try log.forkEvidence() {
            partial.forks += 1
            let location = "forks[\(fork.author.short)#\(fork.seq)]"
            if fork.refused.author != fork.author || fork.refused.seq != fork.seq || !fork.refused.verifySignature()
                || fork.refused.id == fork.kept
            {
                partial.findings.append(
                    Finding(code: "bad_fork_evidence", message: "fork evidence that does not prove a fork", event: fork.refused.id,
                        location: location))
            } else {
                partial.findings.append(
                    Finding(
                        code: "fork",
                        message: "feed \(fork.author.hex) forked at #\(fork.seq): kept \(fork.kept.hex), refused \(fork.refused.id.hex)",
                        event: fork.refused.id, location: location))
            }
        }

        // 4. Blobs: each one's chunks hash to its name.
        for (hash, _) in try blobs.all() {
            partial.blobs += 1
            do { _ = try blobs.read(hash) } catch {
                partial.findings.append(Finding(code: "blob_damaged", message: "\(error)", event: nil, location: "blobs[\(hash.hex)]"))
            }
        }

        return partial
    }
}


/// Step 5 of `verify`, event by event (Specs/encryption.md): effective
/// messages whose sealed body names an epoch no effective key event
/// introduced (a member's device could never read them). A `chat.key` that
/// breaks its schema needs no check of its own: step 1's decoding refuses
/// it (`undecodable`), as it refuses any payload that breaks its kind's
/// schema.
struct EncryptionAudit {
    /// The projections that say which epochs a chat has; nil while none can
    /// be read (the live ones are stale), and then each sealed message is
    /// kept for `finish(against:)`.
    private var projections: Projections?
    private var epochs: [ObjectID: Set<Hash32>] = [:]
    private var held: [(chat: ObjectID, epoch: Hash32, kind: EventKind, place: EventPlace)] = []
    private(set) var findings: [Finding] = []

    init(_ projections: Projections?) { self.projections = projections }

    /// Checks the messages held while no projections could be read against
    /// `projections` (a rebuild of the same log).
    mutating func finish(against projections: Projections) throws {
        self.projections = projections
        for m in held { try check(chat: m.chat, epoch: m.epoch, kind: m.kind, place: m.place) }
        held = []
    }

    /// What the audit needs of an event, read where it was decoded (a
    /// verify pass's worker): a message sealed under `epoch` in `chat`;
    /// nil for any other event.
    struct Examined: Sendable {
        let chat: ObjectID
        let epoch: Hash32

        /// `payload`: `e`'s, as decoded (nil when purged).
        init?(_ e: Event, payload: CBORValue?) {
            guard e.kind == .messageSent || e.kind == .messageEdited, let payload else { return nil }
            let body: [UInt8]
            let chat: ObjectID
            if e.kind == .messageSent {
                guard let sent = try? MessageSentPayload(reading: payload) else { return nil }
                (body, chat) = (sent.body, e.object)
            } else {
                guard let edit = try? MessageEditedPayload(reading: payload) else { return nil }
                (body, chat) = (edit.body, edit.chat)
            }
            guard body.count >= 32, let epoch = Bytes32(body[0..<32]) else { return nil }
            self.chat = chat
            self.epoch = epoch
        }
    }

    mutating func observe(_ e: CheckedEvent, arrival: UInt64) throws {
        guard let sealed = e.encryption else { return }
        let place = EventPlace(arrival, e.link)
        guard projections != nil else {
            held.append((sealed.chat, sealed.epoch, e.kind, place))
            return
        }
        try check(chat: sealed.chat, epoch: sealed.epoch, kind: e.kind, place: place)
    }

    private mutating func check(chat: ObjectID, epoch: Hash32, kind: EventKind, place: EventPlace) throws {
        guard let projections else { return }
        // Whether it took effect is looked up only for the rare message
        // under an unknown epoch: one read of the store per message otherwise.
        if try !epochs(of: chat, in: projections).contains(epoch), try projections.noEffect(place.id) == nil {
            findings.append(
                Finding(
                    code: "epoch_unknown",
                    message: "\(kind.name) in chat \(chat.short) is sealed under epoch \(epoch.short), which no effective chat.key introduced: no member device can read it",
                    event: place.id, location: place.location))
        }
    }

    private mutating func epochs(of chat: ObjectID, in projections: Projections) throws -> Set<Hash32> {
        if let known = epochs[chat] { return known }
        let set = Set(try projections.epochs(of: chat).map(\.epoch))
        epochs[chat] = set
        return set
    }
}

/// What the verify pass keeps of an event once a worker has decoded and
/// checked it: plain values, so the event's buffers are freed by the thread
/// that allocated them, and the consuming thread (the feed, kind and
/// encryption audits) neither retains one nor decodes a payload again.
struct CheckedEvent: Sendable {
    let link: FeedAudit.Link
    let kind: EventKind
    let purged: Bool
    let encryption: EncryptionAudit.Examined?

    init(_ e: Event) {
        link = FeedAudit.Link(e)
        kind = e.kind
        purged = e.payloadBytes == nil
        encryption = EncryptionAudit.Examined(e, payload: e.payload)
    }
}

/// Where a stored event is, kept as values and spelled out only for a
/// finding: a string per event of the log cost more than its decoding's
/// bookkeeping.
struct EventPlace {
    let arrival: UInt64
    let event: FeedAudit.Link

    init(_ arrival: UInt64, _ event: FeedAudit.Link) {
        self.arrival = arrival
        self.event = event
    }

    var id: EventID { event.id }
    var location: String { "envelopes[\(arrival)] (\(event.id.hex), \(event.author.short)#\(event.seq))" }
}

/// A count one thread sets and another reads (the fold's progress).
final class ProgressCount: Sendable {
    private let count = Atomic<Int>(0)
    func set(_ value: Int) { count.store(value, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
