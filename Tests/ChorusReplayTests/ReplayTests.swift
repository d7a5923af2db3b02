import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusProjections
import ChorusStorage
import ChorusStore
@testable import ChorusReplay
import ChorusTestSupport
import Foundation
import Testing

/// A store with a known history, built through the node API:
/// - Ana (phone) and Ben; an issuer that credits Ana twice with one receipt;
/// - Ana edits her name twice; Ben tries to edit Ana's profile;
/// - Ana posts two pictures and deletes one (purged payload, gone blob);
/// - Ana spends, then tries to spend beyond her rights;
/// - a peer hands over a fork of Ben's feed (kept as evidence).
struct KnownHistory {
    let dir: String
    let ana: UserID
    let anaDevice: DeviceID
    let ben: UserID
    let keptPicture: PictureID
    let deletedPicture: PictureID
    let firstName: EventID
    let secondName: EventID
    let benEdit: EventID
    let credit: EventID
    let duplicateCredit: EventID
    let spend: EventID
    let spendHLC: HLC
    let beyondRights: EventID
    var store: String { dir + "/ana" }

    static func build() async throws -> KnownHistory {
        let dir = NSTemporaryDirectory() + "chorus-replay-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let issuerNode = opened(try await Node.create(at: dir + "/issuer", network: NetworkConfig()))
        await issuerNode.close()
        let issuerKey = try Node.createIssuer(at: dir + "/issuer")
        let network = NetworkConfig(issuers: [issuerKey], slotPrices: [0, 50])
        let ana = opened(try await Node.create(at: dir + "/ana", deviceName: "phone", network: network))
        let ben = opened(try await Node.create(at: dir + "/ben", deviceName: "laptop", network: network))
        let issuer = opened(try await Node.open(at: dir + "/issuer"))

        let firstName = try await ana.setProfile(.name, .text("Ana")).id
        let secondName = try await ana.setProfile(.name, .text("Ana Lima")).id
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3]
        let kept = try await ana.addPicture(png, caption: "kept").object
        let deleted = try await ana.addPicture(png + [4], caption: "to delete").object
        try await ana.deletePicture(deleted)

        let benEdit = try await ben.append(
            .profileSet, object: ana.identity.user.raw, payload: .textMap([("field", .text("name")), ("value", .text("hacked"))])
        ).id
        _ = await issuer.ingest(try ana.arrivals().map { $0.event.encoded() })
        let credit = try await issuer.creditCoins(100, to: ana.identity.user, receipt: "store-tx-1").id
        let duplicate = try await issuer.creditCoins(100, to: ana.identity.user, receipt: "store-tx-1").id
        _ = await ana.ingest(try issuer.arrivals().map { $0.event.encoded() })
        _ = await ana.ingest(try ben.arrivals().map { $0.event.encoded() })
        let spend = try await ana.spendCoins(40, for: "stickers")
        // Beyond rights: signed directly, as a buggy or hostile client would.
        let beyond = try await ana.append(
            .coinSpent, object: ana.identity.user.raw, payload: .textMap([("amount", .unsigned(1000)), ("for", .text("too much"))])
        ).id

        // A fork of Ben's device feed at seq 1, as a misbehaving peer would send it.
        let benDeviceFeed = try ben.feed(ben.identity.device.raw)
        let benFirst = try #require(benDeviceFeed.first?.event)
        let forkKey = try ben.deviceSigningKey()
        let fork = try Event.sign(
            with: forkKey, seq: 1, prev: nil, hlc: benFirst.hlc, kind: .profileSet, object: ben.identity.user.raw,
            payload: .textMap([("field", .text("bio")), ("value", .text("the other branch"))]))
        let report = await ana.ingest(events: [fork])
        #expect(report.refused == 1)

        let history = KnownHistory(
            dir: dir, ana: ana.identity.user, anaDevice: ana.identity.device, ben: ben.identity.user, keptPicture: kept,
            deletedPicture: deleted, firstName: firstName, secondName: secondName, benEdit: benEdit, credit: credit,
            duplicateCredit: duplicate, spend: spend.id, spendHLC: spend.event.hlc, beyondRights: beyond)
        await ana.close()
        await ben.close()
        await issuer.close()
        return history
    }

    func cleanup() { try? FileManager.default.removeItem(atPath: dir) }
}

struct ReplayTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

@Suite("Replay tool", .serialized, .closingNodes)
struct ReplayTests {
    @Test func verifyOnAHealthyStoreReportsTheForkAndNothingElse() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let report = try ReplayStore.open(h.store).verify(digests: true)
        #expect(report.findings.map(\.code) == ["fork"])
        #expect(report.forks == 1)
        #expect(report.projectionsMatch == true)
        #expect(report.liveDigest == report.rebuiltDigest)
        // Taken from the fold of the copy when the stored state is the same
        // byte for byte: still the live store's own digest.
        #expect(report.liveDigest == (try ReplayStore.open(h.store).projections.digest()))
        #expect(report.purged["picture.created"] == 1)
        #expect(report.perKind["coin.credited"] == 2)

        // Digests only when asked for: the comparison is the same without them.
        let plain = try ReplayStore.open(h.store).verify()
        #expect(plain.findings.map(\.code) == ["fork"] && plain.projectionsMatch == true)
        #expect(plain.liveDigest == nil && plain.rebuiltDigest == nil)
    }

    @Test func rebuildComparesTheLiveDigestWithoutRecomputingItWhenTheStoredStateIsTheSame() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let live = try ReplayStore.open(h.store).projections.digest()
        let same = try ReplayStore.open(h.store).rebuild(to: h.dir + "/same")
        #expect(same.digest == live && same.liveDigest == live && same.liveStale == nil)
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            try s.projections.unsafePutStateEntry(key: [0x60] + h.anaDevice.bytes, value: LogStore.encodeU64(1_000_000))
        }
        let edited = try ReplayStore.open(h.store).rebuild(to: h.dir + "/edited")
        // The fold of the log is unchanged; the live digest is the edited store's own.
        #expect(edited.digest == live)
        #expect(edited.liveDigest == (try ReplayStore.open(h.store).projections.digest()) && edited.liveDigest != live)
    }

    /// `rebuild --out` copies the store page for page, then keeps only the
    /// log's, the blobs' and the projections' databases, in a data file
    /// only its owner reads.
    @Test func aRebuiltCopyHoldsTheLogBlobsAndProjectionsOnlyForItsOwner() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            let extra = try s.env.openDatabase("node_only")
            try s.env.write { txn in try txn.put(extra, [1], [2]) }
        }
        let source = try ReplayStore.open(h.store)
        #expect(try source.env.databaseNames().contains("node_only"))
        let rebuilt = try source.rebuild(to: h.dir + "/out")
        #expect(rebuilt.digest == rebuilt.liveDigest)
        #expect(try rebuilt.copy.log.eventCount() == (try source.log.eventCount()))
        #expect(try rebuilt.copy.projections.isCurrent())
        // The node's own bookkeeping (its peers, inbox, routing) stays behind too.
        #expect(try source.env.databaseNames().contains("peers"))
        #expect(
            Set(try rebuilt.copy.env.databaseNames())
                == Set(try source.env.databaseNames()).subtracting(["node_only"] + Store.Bookkeeping.databaseNames))
        let mode = try FileManager.default.attributesOfItem(atPath: h.dir + "/out/data.mdb")[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// `rebuild --out` onto a disk too small for the copy: a clear
    /// "disk full", and no partial data file left in the output.
    @Test(.enabled(if: getuid() == 0, "mounting a small tmpfs needs root"))
    func aRebuildOntoAFullDiskSaysSoAndLeavesNoPartialCopy() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = dir.store("source")
        let node = opened(try await Node.create(at: store, network: NetworkConfig()))
        for i in 0..<24 {
            let bytes = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ i) }
            _ = try await node.addPicture(bytes, mime: "image/png")
        }
        await node.close()
        let mountPoint = dir.store("tiny")
        await withSmallDisk(at: mountPoint, size: "2m") {
            let out = mountPoint + "/out"
            #expect {
                _ = try ReplayStore.open(store).rebuild(to: out)
            } throws: { error in
                guard case .diskFull(let operation) = error as? StorageError else { return false }
                return operation.hasPrefix("mdb_env_copy2")
            }
            #expect(!FileManager.default.fileExists(atPath: out + "/data.mdb"))
        }
    }

    @Test func aProjectionEditedBehindAnIntactLogIsFound() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            try s.projections.unsafePutStateEntry(key: [0x60] + h.anaDevice.bytes, value: LogStore.encodeU64(1_000_000))
        }
        let report = try ReplayStore.open(h.store).verify(digests: true)
        #expect(report.liveDigest != report.rebuiltDigest && report.projectionsMatch == false)
        // The stored states differ, so the live digest is computed on its own.
        #expect(report.liveDigest == (try ReplayStore.open(h.store).projections.digest()))
        #expect(report.findings.map(\.code).sorted() == ["fork", "projection_differs"])
        #expect(report.findings.contains { $0.code == "projection_differs" && $0.message.contains("coin rights of \(h.anaDevice.hex)") })
        // Without digests the difference is found all the same.
        let plain = try ReplayStore.open(h.store).verify()
        #expect(plain.projectionsMatch == false && plain.liveDigest == nil)
        #expect(plain.findings.map(\.code).sorted() == ["fork", "projection_differs"])
    }

    /// `verify` runs beside a live node: the live digest it compares is
    /// taken in the snapshot whose log it folds, whatever is written after.
    @Test func theLiveDigestIsTakenInTheSnapshotCopied() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let s = try ReplayStore.open(h.store, writable: true)
        let scratch = try ScratchDirectory()
        let (copy, inSnapshot) = try s.copyLog(to: scratch.path + "/copy") { snapshot, _ in
            let digest = try s.projections.digest(in: snapshot)
            // Written by "a node" after the snapshot was taken.
            try s.projections.unsafePutStateEntry(key: [0x60] + h.anaDevice.bytes, value: LogStore.encodeU64(7))
            return digest
        }
        try copy.store.rebuild()
        #expect(try copy.projections.digest() == inSnapshot)
        #expect(try s.projections.digest() != inSnapshot)
    }

    /// `verify`'s scratch store is the whole environment copied page for
    /// page, of the snapshot it compares in; when a node commits while it
    /// is copied, the log's tables are copied instead, and the comparison
    /// reads the snapshot that copy is of.
    @Test func theWholeCopyIsOfTheSnapshotComparedOrNotMadeAtAll() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let s = try ReplayStore.open(h.store, writable: true)
        let scratch = try ScratchDirectory()
        let rights = [0x60] + h.anaDevice.bytes
        let (whole, wholeDigest) = try s.copyLog(to: scratch.path + "/whole", whole: true) { snapshot, _ in
            try s.projections.digest(in: snapshot)
        }
        #expect(try whole.projections.isCurrent())  // the live projections came with it
        try whole.store.rebuild()
        #expect(try whole.projections.digest() == wholeDigest)

        let (tables, seen) = try s.copyLog(
            to: scratch.path + "/tables", whole: true,
            copyWhole: { env, output, snapshot in
                // "A node" commits after the snapshot, before LMDB's copy starts.
                try s.projections.unsafePutStateEntry(key: rights, value: LogStore.encodeU64(7))
                return try env.copyWhole(to: output, asOf: snapshot)
            }
        ) { snapshot, _ in try s.projections.stateEntries(in: snapshot).first { $0.key == rights }?.value }
        #expect(try !tables.projections.isCurrent())  // the log's tables only
        #expect(try tables.log.eventCount() == (try s.log.eventCount()))
        #expect(seen == LogStore.encodeU64(7))  // compared in the snapshot copied: the later one
    }

    @Test func aForgedSignatureIsFoundWhereItIsAndItsFeedStillChecked() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let stored: StoredEvent
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            stored = try #require(try s.log.event(h.secondName))
            var bytes = stored.event.encoded()
            let signature = try #require(
                (0...(bytes.count - 64)).first { bytes[$0..<($0 + 64)].elementsEqual(stored.event.signature) })
            bytes[signature + 10] ^= 0x01
            try s.log.unsafeWrite(database: "envelopes", key: LogStore.encodeU64(stored.arrival), value: bytes)
        }
        let report = try ReplayStore.open(h.store).verify()
        let forged = try #require(report.findings.first { $0.code == "bad_signature" })
        #expect(forged.event == stored.event.id)
        #expect(forged.location == "envelopes[\(stored.arrival)] (\(stored.event.id.hex), \(stored.event.author.short)#\(stored.event.seq))")
        // The event decodes, so its feed is checked with it: no feed finding.
        #expect(report.findings.map(\.code).sorted() == ["bad_signature", "fork"])
        // Counted as read, not by kind: a forged event is no event of its kind.
        #expect(report.events == (try ReplayStore.open(h.store).log.eventCount()))
        #expect(report.perKind.values.reduce(0, +) == report.events - 1)
    }

    @Test func damageIsFoundWithItsLocation() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        // A flipped byte inside a stored event's payload.
        var arrival: UInt64 = 0
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            let stored = try #require(try s.log.event(h.secondName))
            var bytes = stored.event.encoded()
            bytes[bytes.count - 20] ^= 0x01  // inside the payload: its hash no longer matches
            try s.log.unsafeWrite(database: "envelopes", key: LogStore.encodeU64(stored.arrival), value: bytes)
            arrival = stored.arrival
        }
        var findings = try ReplayStore.open(h.store).verify().findings
        #expect(findings.contains { $0.code == "undecodable" && $0.location == "envelopes[\(arrival)]" && $0.message.contains("payload") })

        // A flipped byte in a blob's chunk as well: reported, and the copy
        // that leaves the unreadable event out leaves the blob out too.
        let blob: Hash32
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            blob = try #require(try s.blobs.all().first?.hash)
            let chunks = try s.env.openDatabase("blobs")
            let key = blob.bytes + [0, 0, 0, 0]
            try s.env.write { txn in
                var chunk = try #require(try txn.get(chunks, key))
                chunk[0] ^= 0x01
                try txn.put(chunks, key, chunk)
            }
        }
        findings = try ReplayStore.open(h.store).verify().findings
        #expect(findings.contains { $0.code == "blob_damaged" && $0.location == "blobs[\(blob.hex)]" })
        #expect(findings.contains { $0.code == "undecodable" })

        // A projection entry edited behind the log's back.
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            try s.projections.unsafePutStateEntry(key: [0x60] + h.anaDevice.bytes, value: LogStore.encodeU64(1_000_000))
        }
        findings = try ReplayStore.open(h.store).verify().findings
        #expect(findings.contains { $0.code == "projection_differs" && $0.message.contains("coin rights of \(h.anaDevice.hex)") })

        // A missing feed entry.
        do {
            let s = try ReplayStore.open(h.store, writable: true)
            try s.log.unsafeWrite(database: "feed_positions", key: h.anaDevice.bytes + LogStore.encodeU64(1), value: nil)
        }
        findings = try ReplayStore.open(h.store).verify().findings
        #expect(findings.contains { $0.code == "feed" && $0.message.contains("position 1 missing") })
    }

    /// `LogStore.integrityProblems` (and verify's feed findings, the same
    /// `FeedAudit`) names each kind of damage to the log's indexes.
    @Test func feedDamageOfEachKindIsNamed() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let s = try ReplayStore.open(h.store, writable: true)
        #expect(try s.log.integrityProblems().isEmpty)
        let stored = try #require(try s.log.event(h.secondName))
        let head = try #require(try s.log.allHeads().first { $0.author == h.anaDevice.raw }?.head)

        // Events "appended after the pass": the audit of a prefix of the log
        // leaves the index entries of later arrivals out.
        var prefix = FeedAudit()
        try s.log.rawEnvelopes { slice in
            for record in slice where record.arrival <= stored.arrival {
                prefix.observe(try LogStore.decodeTrusted(record.bytes, arrival: record.arrival), arrival: record.arrival)
            }
            return true
        }
        #expect(try prefix.finish(s.log).isEmpty)

        let id = h.secondName
        try s.log.unsafeWrite(database: LogStore.idsName, key: id.bytes, value: LogStore.encodeU64(stored.arrival + 1))
        try s.log.unsafeWrite(database: "heads", key: h.anaDevice.bytes, value: LogStore.encodeU64(head.seq + 5) + head.id.bytes + LogStore.encodeU64(head.hlc.rawValue))
        try s.log.unsafeWrite(database: "feed_positions", key: h.anaDevice.bytes + LogStore.encodeU64(1), value: nil)
        let problems = try s.log.integrityProblems()
        #expect(problems.contains("the id index does not map \(id.hex) to arrival \(stored.arrival)"), "\(problems)")
        #expect(
            problems.contains("the id index lists arrival \(stored.arrival + 1) under \(Hex.encode(Array(id.bytes[0..<8]))), which holds no event with an id starting so"),
            "\(problems)")
        #expect(problems.contains("feed \(h.anaDevice.raw.hex): head does not match its last event"), "\(problems)")
        #expect(problems.contains("feed \(h.anaDevice.raw.hex): position 1 missing (head is \(head.seq + 5))"), "\(problems)")
        #expect(problems.count == 4, "\(problems)")

        try s.log.unsafeWrite(database: LogStore.idsName, key: id.bytes, value: nil)
        let missing = try s.log.integrityProblems()
        #expect(missing.contains("the id index does not map \(id.hex) to arrival \(stored.arrival)"), "\(missing)")
        let count = try s.log.eventCount()
        #expect(missing.contains("\(count) events stored but \(count - 1) in the id index"), "\(missing)")

        // `finish(_:)` reads the id index in two halves of its key space on
        // two threads: with damage in both halves it names what one reader
        // (`finish(_:in:)`, which `integrityProblems` uses) names, in the
        // same order.
        let first = try #require(try s.log.rawEnvelopes(since: 0, limit: 1).first)
        for prefix: UInt8 in [0x10, 0xF0] {
            try s.log.unsafeWrite(database: LogStore.idsName, key: [prefix, 1, 2, 3, 4, 5, 6, 7] + [UInt8](repeating: 0, count: 24), value: LogStore.encodeU64(first.arrival))
        }
        var audit = FeedAudit()
        try s.log.rawEnvelopes { slice in
            for record in slice { audit.observe(try LogStore.decodeTrusted(record.bytes, arrival: record.arrival), arrival: record.arrival) }
            return true
        }
        var oneReader = audit
        let expected = try s.log.env.read { try oneReader.finish(s.log, in: $0) }
        #expect(try audit.finish(s.log) == expected)
        #expect(expected == (try s.log.integrityProblems()))
        let halves = expected.filter { $0.hasPrefix("the id index lists arrival \(first.arrival) under ") }
        #expect(halves == ["1001020304050607", "f001020304050607"].map {
            "the id index lists arrival \(first.arrival) under \($0), which holds no event with an id starting so"
        })
    }

    /// Scratch stores go to memory only when it has room for them, in a
    /// directory only the owner can list or enter.
    @Test func scratchDirectoriesGoWhereThereIsRoom() throws {
        let fits = try ScratchDirectory(room: 0)
        let tooBig = try ScratchDirectory(room: .max)
        #expect(tooBig.path.hasPrefix(NSTemporaryDirectory()))
        if FileManager.default.fileExists(atPath: "/dev/shm") { #expect(fits.path.hasPrefix("/dev/shm/")) }
        for scratch in [fits, tooBig] {
            #expect(FileManager.default.fileExists(atPath: scratch.path))
            let mode = try FileManager.default.attributesOfItem(atPath: scratch.path)[.posixPermissions] as? Int
            #expect(mode == 0o700)
        }
    }

    @Test func historyGivesEveryDecision() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let s = try ReplayStore.open(h.store)
        let profile = try s.history(of: h.ana.raw)
        func decision(_ id: EventID) -> Decision? { profile.first { $0.event.id == id }?.decision }
        #expect(decision(h.firstName) == .superseded(by: h.secondName, how: "overwritten"))
        #expect(decision(h.secondName) == .applied)
        #expect(decision(h.benEdit)?.code == "not_owner")
        #expect(decision(h.duplicateCredit)?.code == "duplicate_receipt")
        #expect(decision(h.beyondRights)?.code == "beyond_rights")
        #expect(decision(h.credit) == .applied)

        let picture = try s.history(of: h.deletedPicture.raw)
        #expect(picture.map(\.event.kind) == [.pictureCreated, .pictureDeleted])
        #expect(picture.first?.purged == true)
        if case .superseded(_, let how)? = picture.first?.decision { #expect(how == "deleted") } else {
            Issue.record("the deleted picture's creation is not shown as superseded by the deletion")
        }
    }

    @Test("history names what each kind supersedes: a register per field and per slot, adds by the removal that names them")
    func historyNamesSupersessionsByTheKindsRoles() async throws {
        let dir = NSTemporaryDirectory() + "chorus-replay-test-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let network = NetworkConfig(slotPrices: [0, 0])
        let ana = opened(try await Node.create(at: dir + "/ana", network: network))
        let ben = opened(try await Node.create(at: dir + "/ben", network: network))
        let name = try await ana.setProfile(.name, .text("Ana")).id
        let bio = try await ana.setProfile(.bio, .text("hello")).id
        let name2 = try await ana.setProfile(.name, .text("Ana Lima")).id
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3]
        let picture = try await ana.addPicture(png).object
        let slot0 = try await ana.setSlot(0, picture: picture).id
        let slot1 = try await ana.setSlot(1, picture: picture).id
        let slot0Again = try await ana.setSlot(0, picture: nil).id
        let follow = try await ana.follow(ben.identity.user).id
        let unfollow = try await ana.unfollow(ben.identity.user).id
        await ana.close()
        await ben.close()

        let s = try ReplayStore.open(dir + "/ana")
        let profile = try s.history(of: ana.identity.user.raw)
        func decision(_ id: EventID) -> Decision? { profile.first { $0.event.id == id }?.decision }
        #expect(decision(name) == .superseded(by: name2, how: "overwritten"))
        #expect(decision(bio) == .applied, "another field is another register")
        #expect(decision(slot0) == .superseded(by: slot0Again, how: "overwritten"))
        #expect(decision(slot1) == .applied, "another slot is another register")
        let follows = try s.history(of: ben.identity.user.raw)
        #expect(follows.first { $0.event.id == follow }?.decision == .superseded(by: unfollow, how: "removed"))
    }

    @Test func asOfShowsTheStateJustBeforeAndAfterAnEvent() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let s = try ReplayStore.open(h.store)
        let scratch = try ScratchDirectory()
        let before = try s.asOf(.hlc(HLC(rawValue: h.spendHLC.rawValue - 1)), in: scratch.path + "/before")
        let after = try s.asOf(.hlc(h.spendHLC), in: scratch.path + "/after")
        #expect(try before.projections.balance(of: h.ana).total == 100)
        #expect(try after.projections.balance(of: h.ana).total == 60)
        #expect(try after.log.event(h.spend) != nil && before.log.event(h.spend) == nil)
    }

    @Test func coinAuditTracesEveryCoinAndCountsTheReceiptOnce() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let audit = try ReplayStore.open(h.store).auditCoins()
        #expect(audit.findings.isEmpty)
        #expect(audit.issued == 100 && audit.spent == 40 && audit.held == 60 && audit.conserved)
        #expect(audit.receipts.count == 1)
        #expect(audit.receipts.first?.destinations.values.reduce(0, +) == 100)
        #expect(audit.steps.first { $0.event == h.duplicateCredit }?.noEffect?.code == "duplicate_receipt")
        let ana = try #require(audit.users.first { $0.user == h.ana.raw })
        #expect(ana.credits == 100 && ana.spent == 40 && ana.balance == 60)
    }

    @Test func rebuildAndDiff() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let s = try ReplayStore.open(h.store)
        let scratch = try ScratchDirectory()
        let copy = try s.copy(to: scratch.path + "/copy")
        #expect(try copy.projections.digest() == s.projections.digest())
        #expect(try StateDiff.between(s, copy).isEmpty)
        #expect(try copy.log.forkEvidence().count == 1)
        #expect(try copy.log.integrityProblems().isEmpty)
        #expect(try copy.log.eventCount() == s.log.eventCount() && copy.log.allHeads().map(\.head.id) == s.log.allHeads().map(\.head.id))
        #expect(try copy.blobs.all().map(\.0) == s.blobs.all().map(\.0))
        try copy.projections.unsafePutStateEntry(key: [0x60] + h.anaDevice.bytes, value: nil)
        let diffs = try StateDiff.between(s, copy)
        #expect(diffs.count == 1 && diffs.first?.right == nil && diffs.first?.description.contains("coin rights") == true)
    }

    @Test func statsCountKindsPurgesAndForks() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let stats = try ReplayStore.open(h.store).stats()
        #expect(stats.perKind["picture.created"] == 2 && stats.purged["picture.created"] == 1)
        #expect(stats.forks.count == 1)
        #expect(stats.databases.contains { $0.name == "state" && $0.bytes > 0 })
        #expect(stats.blobs == 1)
        // Every page in use belongs to some database, feed positions' value
        // trees included (LMDB's per-database count leaves those out).
        let counted = stats.databases.reduce(0) { $0 + $1.bytes }
        #expect(stats.databases.contains { $0.name == "feed_positions" && $0.bytes > 0 })
        #expect(counted <= stats.inUseBytes && stats.inUseBytes <= Int(stats.fileBytes))
        // The node's sync bookkeeping is listed too, so its pages are no other's.
        #expect(Set(Store.Bookkeeping.databaseNames).isSubset(of: Set(stats.databases.map(\.name))))
    }

    @Test func verifyChecksMessageEpochsAndStatsCountKindsFromNewerVersions() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let ana = opened(try await Node.open(at: h.store))
        let (chat, bogus) = try await chatWithAnUnknownEpoch(ana, h)
        // The same in a chat that does not exist: it takes no effect, so no member device misses it.
        let nowhere = try await ana.append(
            .messageSent, object: try #require(Bytes32(Random.bytes(32))), payload: .textMap([("body", .bytes(Random.bytes(120)))]))
        #expect(try ana.projections.noEffect(nowhere.id) != nil)
        // An event of a kind from a newer version.
        let newer = SigningKey.generate()
        let future = try UnsignedEvent.ofUnknownKind(
            4242, author: newer.publicKey, seq: 1, prev: nil, hlc: HLC(physicalMillis: 1_700_000_000_000, logical: 0),
            object: newer.publicKey, payload: .textMap([("x", .unsigned(1))])
        ).signed(with: newer)
        #expect(await ana.ingest(events: [future]).accepted == 1)
        await ana.close()

        let store = try ReplayStore.open(h.store)
        let report = try store.verify(digests: true)
        #expect(report.findings.map(\.code).sorted() == ["epoch_unknown", "fork"])
        let unknownEpoch = report.findings.first { $0.code == "epoch_unknown" }
        #expect(unknownEpoch?.event == bogus)
        // The place is spelled out for the finding: its arrival, id and feed position.
        #expect(unknownEpoch?.location.hasPrefix("envelopes[") == true)
        #expect(unknownEpoch?.location.contains(bogus.hex) == true)
        #expect(report.liveDigest == report.rebuiltDigest)
        let stats = try store.stats()
        #expect(stats.unknownKinds == [4242: 1])
        #expect(stats.perKind["unknown.4242"] == 1)

        // History shows ciphertext; --decrypt on the member's own store opens it.
        let replay = try replayProduct("chorus-replay")
        let sealed = try await run(replay, ["history", chat.hex, "--store", h.store, "--json"])
        #expect(sealed.status == 0 && !sealed.stdout.contains("sealed under a real epoch"))
        let opened = try await run(replay, ["history", chat.hex, "--store", h.store, "--decrypt", "--json"])
        #expect(opened.status == 0 && opened.stdout.contains("sealed under a real epoch"), "\(opened.stderr)")
        #expect(opened.stdout.contains("\"title\":\"t\""))
        #expect(opened.stdout.contains("locked: this device holds no key of epoch"))  // the bogus body
    }

    /// Projections built by another format hold records this version would
    /// misread: verify reports them and still checks the log (the chat
    /// epochs against the rebuild), and the tools that read them refuse.
    @Test func projectionsOfAnotherFormatAreReportedNotMisread() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let ana = opened(try await Node.open(at: h.store))
        let bogus = try await chatWithAnUnknownEpoch(ana, h).bogus
        await ana.close()
        let digest = try ReplayStore.open(h.store).projections.digest()
        func markBuilt(_ marker: [UInt8]) throws {
            let s = try ReplayStore.open(h.store, writable: true)
            let index = try s.env.openDatabase("index")
            try s.env.write { txn in try txn.put(index, [0xFF] + Array("built".utf8), marker) }
        }
        try markBuilt(LogStore.encodeU64(12) + [UInt8](repeating: 0, count: 32))
        #expect(try ReplayStore.open(h.store).projections.staleness() == .format(12))

        let report = try ReplayStore.open(h.store).verify(digests: true)
        #expect(report.projectionsMatch == nil)
        #expect(report.findings.map(\.code).sorted() == ["epoch_unknown", "fork", "projections_stale"])
        #expect(report.findings.first { $0.code == "epoch_unknown" }?.event == bogus)
        #expect(report.findings.first { $0.code == "projections_stale" }?.message.contains("projection format 12") == true)
        #expect(report.liveDigest == nil && report.rebuiltDigest == digest)

        let replay = try replayProduct("chorus-replay")
        for command in [["history", h.ana.hex], ["audit", "coins"], ["diff", "--against", h.dir + "/ben"]] {
            let r = try await run(replay, command + ["--store", h.store])
            #expect(r.status == 2 && r.stderr.contains("projection format 12") && r.stderr.contains("chorus-replay rebuild"), "\(command): \(r.stderr)")
        }
        let rebuilt = try await run(replay, ["rebuild", "--store", h.store, "--out", h.dir + "/rebuilt", "--json"])
        #expect(rebuilt.status == 0 && rebuilt.stdout.contains("\"digest\":\"\(digest.hex)\"") && rebuilt.stdout.contains("\"live_digest\":null"))

        // A rebuild cut short leaves no marker at all; another configuration, the same format.
        try ReplayStore.open(h.store, writable: true).projections.markStale()
        #expect(try ReplayStore.open(h.store).projections.staleness() == .neverBuilt)
        try markBuilt(LogStore.encodeU64(Projections.formatVersion) + [UInt8](repeating: 0, count: 32) + Projections.layoutFingerprint.bytes)
        #expect(try ReplayStore.open(h.store).projections.staleness() == .configuration)
        #expect(try ReplayStore.open(h.store).verify().findings.contains { $0.code == "projections_stale" && $0.message.contains("network configuration") })
        // The same format and configuration, another layout of classes and
        // tables (a build that added one without bumping the format), or a
        // marker from before the layout was named: rebuilt too.
        await opened(try await Node.open(at: h.store)).close()
        let current = try #require(try {
            let store = try ReplayStore.open(h.store)
            let index = try store.env.openDatabase("index")
            return try store.env.read { txn in try txn.get(index, [0xFF] + Array("built".utf8)) }
        }())
        #expect(current.count == 72 && Array(current.suffix(32)) == Projections.layoutFingerprint.bytes)
        for marker in [Array(current.prefix(40)) + [UInt8](repeating: 0, count: 32), Array(current.prefix(40))] {
            try markBuilt(marker)
            #expect(try ReplayStore.open(h.store).projections.staleness() == .layout)
        }
        // A node rebuilds them on open; then verify is clean again.
        await opened(try await Node.open(at: h.store)).close()
        #expect(try ReplayStore.open(h.store).verify().findings.map(\.code).sorted() == ["epoch_unknown", "fork"])
    }

    @Test func commandLineExitCodesAndHelp() async throws {
        let h = try await KnownHistory.build()
        defer { h.cleanup() }
        let replay = try replayProduct("chorus-replay")
        for command in [["verify"], ["rebuild"], ["diff"], ["history"], ["as-of"], ["audit", "coins"], ["stats"]] {
            let r = try await run(replay, command + ["--help"])
            #expect(r.status == 0 && r.stdout.contains("USAGE"), "\(command) --help")
        }
        // The fork is a finding: exit 1, listed in JSON.
        let verify = try await run(replay, ["verify", "--store", h.store, "--json"])
        #expect(verify.status == 1 && verify.stdout.contains("\"code\":\"fork\""))
        #expect(verify.stdout.contains("\"projections\":\"equal\"") && verify.stdout.contains("\"live_digest\":null"))
        let digest = try ReplayStore.open(h.store).projections.digest()
        let withDigests = try await run(replay, ["verify", "--store", h.store, "--digest"])
        #expect(withDigests.status == 1 && withDigests.stdout.contains("projections: equal to a fold of the log"))
        #expect(withDigests.stdout.contains("projection digest: live \(digest.hex)") && withDigests.stdout.contains("log  \(digest.hex)"))
        let audit = try await run(replay, ["audit", "coins", h.ana.hex, "--store", h.store])
        #expect(audit.status == 0 && audit.stdout.contains("store-tx-1") && audit.stdout.contains("NO EFFECT duplicate_receipt"))
        let asOf = try await run(replay, ["as-of", "hlc:\(h.spendHLC.rawValue - 1)", "--store", h.store, "--", "balance", h.ana.hex, "--json"])
        #expect(asOf.status == 0 && asOf.stdout.contains("\"total\":100"), "\(asOf.stderr)")
        let missing = try await run(replay, ["verify", "--store", h.dir + "/nowhere"])
        #expect(missing.status == 2 && missing.stderr.contains("not a Chorus store"))
        // The HLC as the tools print it names that exact point.
        let printed = HLC(rawValue: h.spendHLC.rawValue - 1).description
        let asPrinted = try await run(replay, ["as-of", printed, "--store", h.store, "--", "balance", h.ana.hex, "--json"])
        #expect(asPrinted.status == 0 && asPrinted.stdout == asOf.stdout, "\(printed): \(asPrinted.stderr)")
        #expect(try ReplayPoint.parse(printed) == .hlc(HLC(rawValue: h.spendHLC.rawValue - 1)))
        #expect(try ReplayPoint.parse("2026-11-22T10:15:30.830Z") == .hlc(HLC(physicalMillis: 1_795_342_530_830, logical: .max)))
        // A date alone is its first instant, UTC.
        #expect(try ReplayPoint.parse("2026-11-22") == .hlc(HLC(physicalMillis: 1_795_305_600_000, logical: .max)))
        #expect(throws: ReplayError.self) { try ReplayPoint.parse("2026-11") }
        // A point it cannot read is a usage error that says what it takes, not ArgumentParser's structures.
        let badPoint = try await run(replay, ["as-of", "yesterday", "--store", h.store, "--", "balance"])
        #expect(badPoint.status == 2 && badPoint.stderr.hasPrefix("Error: \"yesterday\" is not a point in time"), "\(badPoint.stderr)")
        // A --store written with the query, as `chorus query` takes it, is the store read.
        let storeAfter = try await run(replay, ["as-of", "hlc:\(h.spendHLC.rawValue - 1)", "--", "balance", h.ana.hex, "--json", "--store", h.store])
        #expect(storeAfter.status == 0 && storeAfter.stdout == asOf.stdout, "\(storeAfter.stderr)")
        let twoStores = try await run(replay, ["as-of", "hlc:1", "--store", h.store, "--", "balance", "--store=\(h.dir)/other"])
        #expect(twoStores.status == 2 && twoStores.stderr.contains("give --store once"), "\(twoStores.stderr)")
    }

    /// Ana's chat "t" with Ben, holding a message sealed under its epoch
    /// and one (`bogus`) whose body names an epoch no key event introduced.
    func chatWithAnUnknownEpoch(_ ana: Node, _ h: KnownHistory) async throws -> (chat: ChatID, bogus: EventID) {
        let chat = try await ana.createChat(title: "t", members: [h.ben]).object
        _ = try await ana.sendMessage(chat, text: "sealed under a real epoch").object
        let bogus = try await ana.append(.messageSent, object: chat.raw, payload: .textMap([("body", .bytes(Random.bytes(120)))])).id
        return (chat, bogus)
    }

    func replayProduct(_ name: String) throws -> String {
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        throw ReplayTestFailure("cannot find \(name) near \(CommandLine.arguments[0])")
    }

    /// Runs a command to completion, waiting off the cooperative threads (`runCommand`).
    func run(_ path: String, _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let r = try await runCommand(path, arguments)
        return (r.status, r.stdout, r.stderr)
    }
}
