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
    /// `fork`, `bad_fork_evidence`, `blob_damaged`, `projection_differs`.
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
    public var liveDigest: Hash32? = nil
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
    public func verify(progress: ((_ stage: String, _ done: Int, _ total: Int) -> Void)? = nil) throws -> VerifyReport {
        var report = VerifyReport()
        let total = try log.eventCount()

        // 6 (begun first). The log's tables are copied as stored to a
        // scratch store, whose projections are folded from scratch while
        // steps 1–5 check the live store: the fold needs none of their
        // results unless they find damage (below).
        let scratch = try ScratchDirectory()
        defer { withExtendedLifetime(scratch) {} }  // removed only once the copies are no longer read
        // The live projections' digest is taken in the snapshot copied, so
        // events a node appends meanwhile change neither.
        var liveDigest: Hash32? = nil
        let copy = try copyLog(to: scratch.path + "/tables") { snapshot in liveDigest = try projections.digest(in: snapshot) }
        let folded = ProgressCount()
        let fold = Background { [copy] in
            try copy.projections.rebuild(progress: { done, _ in folded.set(done) })
            return try copy.projections.digest()
        }
        // 2.–5. The feeds, fork evidence, blobs and chat encryption, on
        // another thread.
        let checks = Background { [self] in try self.storeChecks() }

        // 1. Every record: decode strictly and verify the signature, on all
        // cores. Tolerant: damage must not stop the comparison.
        do {
            try pipelined(from: UInt64(0)) { since in
                try rawSlice(since: since) { record -> (event: Event?, finding: Finding?) in
                    let location = "envelopes[\(record.arrival)]"
                    let event: Event
                    do { event = try LogStore.decodeEnvelope(record.bytes, arrival: record.arrival) } catch {
                        return (nil, Finding(code: "undecodable", message: "\(error)", event: nil, location: location))
                    }
                    guard event.verifySignature() else {
                        return (
                            event,
                            Finding(
                                code: "bad_signature", message: "the signature does not verify for author \(event.author.hex)",
                                event: event.id, location: "\(location) (\(event.id.hex), \(event.author.short)#\(event.seq))")
                        )
                    }
                    return (event, nil)
                }
            } consume: { slice in
                for (_, item) in slice {
                    report.events += 1
                    if let finding = item.finding { report.findings.append(finding) }
                    guard let event = item.event, item.finding == nil else { continue }
                    report.perKind[event.kind.name, default: 0] += 1
                    if event.payloadBytes == nil { report.purged[event.kind.name, default: 0] += 1 }
                }
                progress?("events", report.events, total)
            }
        } catch {
            _ = try? checks.wait()  // nothing reads the stores after this returns
            _ = try? fold.wait()
            throw error
        }
        let checked: VerifyReport
        do { checked = try checks.wait() } catch {
            _ = try? fold.wait()
            throw error
        }
        report.feeds = checked.feeds
        report.forks = checked.forks
        report.blobs = checked.blobs
        report.findings += checked.findings
        report.liveDigest = liveDigest

        // 6. The projections folded from the log. A log whose records cannot
        // all be read, or do not all fit their feeds, is copied again event
        // by event, leaving out what cannot be read or does not fit, as a
        // node would never have stored it: the comparison then shows what
        // the damage changed.
        let rebuilt: ReplayStore
        if report.findings.contains(where: { Self.damageToTheLog.contains($0.code) }) {
            _ = try? fold.wait()
            rebuilt = try self.copy(
                to: scratch.path + "/events", tolerant: true, progress: { done, total in progress?("rebuild", done, total) })
            report.rebuiltDigest = try rebuilt.projections.digest()
        } else {
            rebuilt = copy
            report.rebuiltDigest = try fold.wait(tickingEvery: 0.2) { progress?("rebuild", folded.value, total) }
        }
        if report.liveDigest != report.rebuiltDigest {
            for d in try StateDiff.between(self, rebuilt) {
                report.findings.append(
                    Finding(
                        code: "projection_differs",
                        message: "\(d.description): live \(d.left.map(Hex.encode) ?? "absent"), from the log \(d.right.map(Hex.encode) ?? "absent")",
                        event: nil, location: "state[\(Hex.encode(d.key))]"))
            }
        }
        return report
    }

    /// Findings after which the log, copied as stored, is not what a fold
    /// from its readable events would see.
    static let damageToTheLog: Set<String> = ["undecodable", "wrong_id", "feed", "bad_fork_evidence"]

    /// Steps 2–5 of `verify`: the feeds, fork evidence, blobs and chat
    /// encryption, as a partial report (feeds, forks, blobs, findings).
    func storeChecks() throws -> VerifyReport {
        var partial = VerifyReport()
        // 2. Feeds: every position present and chained, heads and arrivals agree.
        for problem in try log.integrityProblems(verifySignatures: false) where !problem.contains("bad signature") {
            partial.findings.append(Finding(code: "feed", message: problem, event: nil, location: "feeds"))
        }
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

        // 5. Chat encryption (Specs/encryption.md): every key event is well
        // formed, and every effective message names an epoch its chat has.
        partial.findings += try encryptionFindings()

        return partial
    }
}


extension ReplayStore {
    /// Key events re-checked against their schema, and effective messages
    /// whose sealed body names an epoch no effective key event introduced
    /// (a member's device could never read them).
    func encryptionFindings() throws -> [Finding] {
        var findings: [Finding] = []
        var epochs: [ObjectID: Set<Hash32>] = [:]
        func epochsOf(_ chat: ObjectID) throws -> Set<Hash32> {
            if let known = epochs[chat] { return known }
            let set = Set(try projections.epochs(of: chat).map(\.epoch))
            epochs[chat] = set
            return set
        }
        try log.rawEnvelopes { slice in
            for record in slice {
                // Step 1 checked every envelope in full; damage is a finding already.
                guard let e = try? Event.decodeStored(record.bytes), let payload = e.payload
                else { continue }
                let id = e.id
                let location = "envelopes[\(record.arrival)] (\(id.hex), \(e.author.short)#\(e.seq))"
                switch e.kind {
                case .chatKey:
                    if let problem = EventKind.chatKey.schema?.violation(in: payload) {
                        findings.append(Finding(code: "bad_key_event", message: problem, event: id, location: location))
                    }
                case .messageSent, .messageEdited:
                    guard try projections.noEffect(id) == nil,
                        let body = payload[text: "body"]?.bytesValue, body.count >= 32, let epoch = Bytes32(body[0..<32])
                    else { continue }
                    let chat = e.kind == .messageSent ? e.object : payload[text: "chat"]?.bytesValue.flatMap { Bytes32($0) }
                    guard let chat else { continue }
                    if try !epochsOf(chat).contains(epoch) {
                        findings.append(
                            Finding(
                                code: "epoch_unknown",
                                message: "\(e.kind.name) in chat \(chat.short) is sealed under epoch \(epoch.short), which no effective chat.key introduced: no member device can read it",
                                event: id, location: location))
                    }
                default: continue
                }
            }
            return true
        }
        return findings
    }
}

/// A count one thread sets and another reads (the fold's progress).
final class ProgressCount: Sendable {
    private let count = Atomic<Int>(0)
    func set(_ value: Int) { count.store(value, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
