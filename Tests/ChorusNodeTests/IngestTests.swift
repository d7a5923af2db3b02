import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusProjections
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

typealias InvalidVector = InvalidEventVector
typealias VectorFile = EventVectorFile

extension InvalidEventVector: CustomTestStringConvertible {
    public var testDescription: String { "\(name) → \(error)" }
}

/// What a store holds, to show a refused event changed nothing.
func snapshot(_ node: Node) throws -> [String] {
    try node.arrivals().map { "\($0.arrival) \($0.event.id.hex)" }
        + node.heads().map { "\($0.author.hex) \($0.head.seq) \($0.head.id.hex)" }
}

extension IngestReport {
    /// Each result as a word: its error code when refused.
    var codes: [String] {
        results.map { r in
            switch r {
            case .accepted: "accepted"
            case .duplicate: "duplicate"
            case .refused(let e): e.code
            default: "other"
            }
        }
    }
}

@Suite("Ingest", .closingNodes)
struct IngestTests {
    @Test func validVectorsAreAcceptedInAnyOrder() async throws {
        let vectors = try VectorFile.load()
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let clock = ManualClock(vectors.invalid[0].now_ms)
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options(clock: clock)))
        // Reversed: the batch is applied in feed order regardless.
        let report = await node.ingest(vectors.valid.reversed().map { hex($0.envelope_hex) })
        #expect(report.accepted == vectors.valid.count, "\(report.errors)")
        for v in vectors.valid { #expect(try node.event(Bytes32(hex: v.id)!) != nil) }
        #expect(try node.log.integrityProblems() == [])
        let again = await node.ingest(vectors.valid.map { hex($0.envelope_hex) })
        #expect(again.duplicates == vectors.valid.count)
        await node.close()
    }

    /// `envelope` with one byte of its signature changed.
    static func tampered(_ event: Event) -> [UInt8] {
        var bytes = event.encoded()
        let at = bytes.firstRange(of: event.signature)!.lowerBound
        bytes[at] ^= 0x01
        return bytes
    }

    @Test func aHeldEventIsNotVerifiedAgainAndKeepsItsSignature() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let posted = try await node.addPicture(Array("a picture".utf8), mime: "image/png")
        let original = try #require(try node.event(posted.id)).event
        // A copy of a held event under another signature: its header is the
        // held header, so it is a duplicate and the log keeps its envelope.
        let first = await node.ingest([Self.tampered(original)])
        #expect(first.codes == ["duplicate"], "\(first.results)")
        #expect(try node.event(posted.id)?.event.encoded() == original.encoded())
        #expect(try node.log.integrityProblems() == [])
        // Once the payload is purged, a copy would refill it, so its
        // signature is checked: a bad one is refused, a good one refills
        // under the signature the log verified.
        #expect(try node.log.env.write { txn in try node.log.purgePayload(posted.id, in: txn) })
        #expect((await node.ingest([Self.tampered(original)])).codes == ["bad_signature"])
        #expect(try node.event(posted.id)?.event.payloadBytes == nil)
        #expect((await node.ingest([original.encoded()])).codes == ["duplicate"])
        #expect(try node.event(posted.id)?.event.encoded() == original.encoded())
        #expect(try node.log.integrityProblems() == [])
        await node.close()
    }

    @Test("every negative vector is refused with its error and changes nothing", arguments: try VectorFile.load().invalid)
    func negativeVector(_ v: InvalidVector) async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let clock = ManualClock(v.now_ms)
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options(clock: clock)))
        let prior = await node.ingest(v.prior_hex.map(hex))
        #expect(prior.accepted == v.prior_hex.count)
        let before = try snapshot(node)
        let report = await node.ingest([hex(v.envelope_hex)])
        guard case .refused(let error) = report.results.first else {
            Issue.record("not refused: \(report.results)")
            return
        }
        #expect(error.code == v.error, "\(error)")
        #expect(try snapshot(node) == before)
        #expect(try node.log.integrityProblems() == [])
        if v.error == "fork" {
            let forks = try node.forks()
            #expect(forks.count == 1)
            #expect(forks.first?.refused.encoded() == hex(v.envelope_hex))
        } else {
            #expect(try node.forks().isEmpty)
        }
        if v.error == "timestamp_in_future" {
            // Accepted once this node's clock catches up.
            clock.set(v.now_ms + 1000)
            let later = await node.ingest([hex(v.envelope_hex)])
            #expect(later.accepted == 1, "\(later.errors)")
        }
        await node.close()
    }

    @Test func refusalInTheMiddleOfABatchLeavesTheRestIntact() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        var a = FeedWriter(seedByte: 1)
        var b = FeedWriter(seedByte: 2)
        let aEvents = (0..<5).map { a.next("a\($0)") }
        let bEvents = (0..<3).map { b.next("b\($0)") }
        var envelopes = zip(aEvents.prefix(3), bEvents).flatMap { [$0.0.encoded(), $0.1.encoded()] }
        envelopes += aEvents.suffix(2).map { $0.encoded() }
        // Order now: a1 b1 a2 b2 a3 b3 a4 a5. Damage a3's signature.
        envelopes[4][envelopes[4].count - 1] ^= 0x01  // last payload byte: hash mismatch
        envelopes.append(bEvents[0].encoded())  // a duplicate inside the batch
        let report = await node.ingest(envelopes)
        let codes = report.codes
        #expect(codes == ["accepted", "accepted", "accepted", "accepted", "payload_hash_mismatch", "accepted",
                          "sequence_gap", "sequence_gap", "duplicate"])
        #expect(try node.head(of: a.key.publicKey)?.seq == 2)
        #expect(try node.head(of: b.key.publicKey)?.seq == 3)
        // The gap closes when the missing event arrives.
        let rest = await node.ingest(aEvents.suffix(3).map { $0.encoded() })
        #expect(rest.accepted == 3)
        #expect(try node.log.integrityProblems() == [])
        await node.close()
    }

    @Test("a duplicate and a fork of events stored earlier in the same commit are told apart, and every id is found after it")
    func duplicatesAndForksWithinOneCommit() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        var a = FeedWriter(seedByte: 1)
        let first = a.next("one")
        var forked = a
        let second = a.next("two")
        let fork = forked.next("other two")
        let third = a.next("three")
        // One call, so one commit: the feed checks of the last two see the
        // events the commit stored before them, whose id-index entries are
        // written only at its end.
        let report = await node.ingest([first, second, third, fork, second].map { $0.encoded() })
        let codes = report.codes
        #expect(codes == ["accepted", "accepted", "accepted", "fork", "duplicate"])
        #expect(try node.forks().map(\.refused.id) == [fork.id])
        for e in [first, second, third] { #expect(try node.event(e.id)?.event.id == e.id) }
        #expect(try node.event(fork.id) == nil)
        #expect(try node.log.integrityProblems() == [])
        let again = await node.ingest([third, fork].map { $0.encoded() })
        #expect(again.duplicates == 1)
        #expect(try node.forks().count == 1)
        await node.close()
    }

    @Test("the same events in concurrent ingests (two relays serving one feed) are each verified once, and every one is stored once")
    func concurrentIngestsShareSignatureChecks() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options()))
        var writers = (1...6).map { FeedWriter(seedByte: UInt8($0)) }
        let feeds: [[[UInt8]]] = writers.indices.map { w in (0..<400).map { _ in writers[w].next().encoded() } }
        let events = feeds.joined().count
        // Four sessions deliver the same events at once, as relays would:
        // each feed in order, the feeds in another order each, in batches
        // of other sizes.
        var rng = SystemRandomNumberGenerator()
        var deliveries: [[[[UInt8]]]] = []
        for k in 0..<4 {
            let stream: [[UInt8]] = Array((k == 0 ? feeds : feeds.shuffled(using: &rng)).joined())
            let size = 300 * (k + 1)
            var batches: [[[UInt8]]] = []
            for start in stride(from: 0, to: stream.count, by: size) { batches.append(Array(stream[start..<min(stream.count, start + size)])) }
            deliveries.append(batches)
        }
        let reports = await withTaskGroup(of: [IngestReport].self) { group in
            for batches in deliveries {
                group.addTask {
                    var reports: [IngestReport] = []
                    for batch in batches { reports.append(await node.ingest(batch)) }
                    return reports
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        let accepted = reports.reduce(0) { $0 + $1.accepted }
        let refused = reports.reduce(0) { $0 + $1.refused }
        #expect(accepted == events)
        #expect(refused == 0)
        #expect(node.signatureChecks.load(ordering: .relaxed) == events)
        #expect(try node.log.integrityProblems() == [])
        // A copy under a forged signature is not the verified event: it is
        // checked (and, its header held, answered as a duplicate).
        let before = node.signatureChecks.load(ordering: .relaxed)
        let forged = await node.ingest([Self.tampered(try Event.decode(feeds[0][0]))])
        #expect(forged.codes == ["duplicate"])
        #expect(node.signatureChecks.load(ordering: .relaxed) == before)
        await node.close()
    }

    @Test func largeBatchesCommitInSlicesAndStayInFeedOrder() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options(mapSize: 1 << 20)))
        var writers = (1...20).map { FeedWriter(seedByte: UInt8($0)) }
        var envelopes: [[UInt8]] = []
        for _ in 0..<600 { for w in writers.indices { envelopes.append(writers[w].next().encoded()) } }
        var rng = SystemRandomNumberGenerator()
        envelopes.shuffle(using: &rng)
        let report = await node.ingest(envelopes)
        #expect(report.accepted == 12_000, "\(report.errors.prefix(3))")
        #expect(try node.log.integrityProblems() == [])
        #expect(node.log.env.mapSize > 1 << 20)  // the map grew instead of failing
        await node.close()
    }

    @Test("a call started once the previous call's events are queued overlaps its commit and lands after it, in feed order")
    func streamedCallsQueueInOrder() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options()))
        let own = try node.log.eventCount()
        var writers = (1...8).map { FeedWriter(seedByte: UInt8($0)) }
        // Batch k + 1 continues every feed of batch k: out of order, its
        // events would be refused as gaps.
        let batches: [[Event]] = (0..<6).map { _ in (0..<500).flatMap { _ in writers.indices.map { writers[$0].next() } } }
        var reports: [Task<IngestReport, Never>] = []
        for batch in batches {
            let (queued, signal) = AsyncStream<Void>.makeStream()
            reports.append(Task { await node.ingest(events: batch, enqueued: { signal.finish() }) })
            for await _ in queued {}
        }
        for (i, report) in reports.enumerated() {
            let r = await report.value
            #expect(r.accepted == batches[i].count, "batch \(i): \(r.errors.prefix(3))")
        }
        #expect(try node.log.eventCount() == own + 24_000)
        #expect(try node.log.integrityProblems() == [])
        await node.close()
    }

    @Test("a last call handed to the writer in parts keeps every feed in order across the parts, and a forged event still refuses what follows it")
    func lastCallInPartsKeepsFeedOrder() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options()))
        let own = try node.log.eventCount()
        var writers = (1...6).map { FeedWriter(seedByte: UInt8($0)) }
        // 12,000 events in six feeds: the parts (a quarter each) split feeds.
        var events = (0..<2_000).flatMap { _ in writers.indices.map { writers[$0].next() } }
        events.shuffle()
        // A forged signature on feed 1's event #100: the rest of feed 1 is a gap.
        let forged = try #require(events.firstIndex { $0.author == writers[0].key.publicKey && $0.seq == 100 })
        // [header, signature, payload]: the signature's bytes follow the
        // header's and their own two-byte head.
        var envelope = events[forged].encoded()
        let headerEnd = envelope[1] == 0x58 ? 3 + Int(envelope[2]) : 4 + Int(envelope[2]) << 8 + Int(envelope[3])
        envelope[headerEnd + 2] ^= 0x01
        events[forged] = try Event.decode(envelope)
        let report = await node.ingest(events: events, last: true)
        #expect(report.accepted == 12_000 - 1_901, "\(report.errors.prefix(3))")
        #expect(report.codes[forged] == "bad_signature")
        #expect(Set(report.errors.map(\.code)) == ["bad_signature", "sequence_gap"])
        #expect(try node.log.eventCount() == own + 12_000 - 1_901)
        #expect(try node.log.integrityProblems() == [])
        await node.close()
    }

    @Test("a call started after another's verification began goes to the writer after it: its feed continues the first's")
    func overlappingCallsKeepTheirOrder() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options()))
        var writer = FeedWriter(seedByte: 9)
        let first = (0..<3).map { _ in writer.next() }
        let second = (0..<3).map { _ in writer.next() }
        // The first call's hand-over to the writer, released by the test.
        let (release, opened) = AsyncStream<Void>.makeStream()
        let gate = Task { for await _ in release {} }
        let handedOver = Atomic<Bool>(false)
        let secondCall = Task {
            await node.ingest(events: second, after: gate, enqueued: { handedOver.store(true, ordering: .sequentiallyConsistent) })
        }
        // Before the gate opens the second call hands nothing to the writer,
        // however long it has had to verify: here that would be a sequence
        // gap. (The pause gives a broken order time to show; it bounds
        // nothing a correct one does.)
        try await Task.sleep(for: .milliseconds(300))
        let handedOverEarly = handedOver.load(ordering: .sequentiallyConsistent)
        #expect(!handedOverEarly)
        #expect(try node.head(of: writer.key.publicKey) == nil)
        let report = await node.ingest(events: first, enqueued: { opened.finish() })
        #expect(report.accepted == 3)
        let after = await secondCall.value
        #expect(after.accepted == 3, "\(after.codes)")
        #expect(try node.head(of: writer.key.publicKey)?.seq == 6)
        await node.close()
    }

    @Test func acceptedRemoteTimestampsMoveTheLocalClockForward() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let clock = ManualClock(1_700_000_000_000)
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options(clock: clock)))
        var remote = FeedWriter(seedByte: 9, startMillis: 1_700_000_000_000 + 30_000)
        let ahead = remote.next()
        #expect(await node.ingest(events: [ahead]).accepted == 1)
        let local = try await node.append(.profileSet, object: node.identity.user.raw,
                                          payload: .textMap([("field", .text("city")), ("value", .text("Oslo"))]))
        #expect(local.hlc > ahead.hlc)
        await node.close()
    }
}

@Suite("Event files read in slices", .closingNodes)
struct EventFileReaderTests {
    /// 3,000 events of about 1 KB: files of 3 MB, across several of the reader's 1 MiB chunks.
    func events() throws -> [Event] {
        let key = SigningKey.generate()
        var out: [Event] = []
        for seq in 1...3000 {
            out.append(try Event.sign(
                with: key, seq: UInt64(seq), prev: out.last?.id, hlc: HLC(physicalMillis: 1_700_000_000_000 + UInt64(seq), logical: 0),
                kind: .profileSet, object: key.publicKey,
                payload: ProfileSetPayload(field: .bio, value: .text("\(seq) " + String(repeating: "z", count: 900))).cbor))
        }
        return out
    }

    func read(_ bytes: [UInt8], limit: Int) throws -> (envelopes: [[UInt8]], unreadable: (index: Int, reason: String)?) {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let path = tmp.path + "/file"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let handle = try #require(FileHandle(forReadingAtPath: path))
        defer { try? handle.close() }
        let reader = EventFileReader(handle: handle)
        var out: [[UInt8]] = []
        while true {
            let slice = try reader.next(limit: limit)
            if slice.isEmpty { break }
            #expect(slice.count <= limit)
            out += slice
        }
        return (out, reader.unreadable)
    }

    @Test func bothFormatsReadBackEveryEnvelopeAcrossChunkBoundaries() throws {
        let all = try events()
        for format in EventFileFormat.allCases {
            var file: [UInt8] = []
            for (i, e) in all.enumerated() {
                EventFile.append(StoredEvent(event: e, arrival: UInt64(i + 1)), format: format, to: &file)
            }
            #expect(file.count > 3 << 20)
            let (envelopes, unreadable) = try read(file, limit: 700)
            #expect(unreadable == nil, "\(format)")
            #expect(envelopes == all.map { $0.encoded() }, "\(format)")
            // Cut in the middle of the last event: everything before it reads.
            let (cut, why) = try read(Array(file.dropLast(300)), limit: 700)
            #expect(cut.count == all.count - 1 && why?.index == all.count - 1, "\(format)")
        }
    }
}
