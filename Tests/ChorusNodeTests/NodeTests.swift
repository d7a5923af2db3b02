import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusStore
import Foundation
import Synchronization
import ChorusTestSupport
import Testing

@testable import ChorusLog
@testable import ChorusProjections
@testable import ChorusStorage

func bio(_ text: String) -> CBORValue { .textMap([("field", .text("bio")), ("value", .text(text))]) }

@Suite("Node: local writes and the store", .closingNodes)
struct NodeTests {
    @Test func initBindsTheDeviceWithTheUserKey() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), deviceName: "phone", network: NetworkConfig()))
        let userFeed = try node.feed(node.identity.user.raw)
        #expect(userFeed.count == 1)
        let first = try #require(userFeed.first?.event)
        #expect(first.kind == .deviceAdded && first.seq == 1 && first.header.prev == nil)
        #expect(first.object == node.identity.device.raw)
        #expect(first.payload?[text: "name"] == .text("phone"))
        // The device's consent to the binding, checked by the projections.
        let proof = try #require(first.payload?[text: "proof"]?.bytesValue)
        #expect(Ed25519.verify(signature: proof, message: DeviceBinding.proofMessage(user: node.identity.user.raw), publicKey: node.identity.device.raw))
        #expect(try node.projections.binding(of: node.identity.device.raw)?.user == node.identity.user.raw)
        await node.close()

        var st = stat()
        #expect(stat(tmp.store("a") + "/keys/user.secret", &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(stat(tmp.store("a") + "/keys/device.secret", &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(stat(tmp.store("a"), &st) == 0 && st.st_mode & 0o777 == 0o700)
        await #expect(throws: NodeError.self) { _ = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig())) }
    }

    @Test func concurrentAppendsFormOneContiguousVerifiedChain() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let ids = try await withThrowingTaskGroup(of: [EventID].self) { group in
            for task in 0..<64 {
                group.addTask {
                    var ids: [EventID] = []
                    for i in 0..<8 { ids.append(try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("\(task)/\(i)")).id) }
                    return ids
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(ids.count == 512 && Set(ids).count == 512)
        // seq 1 is the device.key a new store publishes (Specs/encryption.md §3).
        let feed = try node.feed(node.identity.device.raw)
        #expect(feed.first?.event.kind == .deviceKey)
        #expect(feed.map(\.event.seq) == Array(1...513))
        #expect(Set(feed.dropFirst().map(\.event.id)) == Set(ids))
        #expect(try node.log.integrityProblems() == [])
        let stats = node.writerStatistics
        #expect(stats.commits >= 1 && stats.commits <= 513)
        await node.close()
    }

    @Test func acknowledgedEventsSurviveReopening() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        var node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let e = try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("durable"))
        let identity = node.identity
        await node.close()
        node = opened(try await Node.open(at: tmp.store("a")))
        #expect(node.identity == identity)
        #expect(try node.event(e.id)?.event == e)
        let next = try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("after reopen"))
        #expect(next.seq == e.seq + 1 && next.header.prev == e.id && next.hlc > e.hlc)
        await node.close()
    }

    @Test("another process that writes is refused while this one writes the store; one that reads is not")
    func aSecondWriterIsRefusedButReadersAreNot() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        _ = try await node.setProfile(.bio, .text("held"))
        let chorus = try productPath("chorus")
        let write = try await runCommand(chorus, ["profile", "set", "bio", "other", "--store", tmp.store("a")], environment: ["CHORUS_WRITER_WAIT": "0"])
        #expect(write.status == 2 && write.stderr.contains("in use by another process"), "\(write.stderr)")
        let read = try await runCommand(chorus, ["query", "profile", "--store", tmp.store("a"), "--json"])
        #expect(read.status == 0 && read.stdout.contains("held"), "\(read.stderr)")
        // By default a writer waits its turn: it goes through once this one closes.
        let waited = Mutex<CommandResult?>(nil)
        let store = tmp.store("a")
        let waiter = Thread { waited.withLock { $0 = try? runCommandSync(chorus, ["profile", "set", "bio", "after the wait", "--store", store]) } }
        waiter.start()
        try await Task.sleep(for: .milliseconds(300))
        await node.close()
        for _ in 0..<600 where waited.withLock({ $0 == nil }) { try await Task.sleep(for: .milliseconds(100)) }
        let after = try #require(waited.withLock { $0 })
        #expect(after.status == 0, "\(after.stderr)")
        let reader = opened(try await Node.open(at: tmp.store("a"), readOnly: true))
        await #expect(throws: NodeError.self) { try await reader.append(.profileSet, object: reader.identity.user.raw, payload: bio("x")) }
        await reader.close()
        let reopened = opened(try await Node.open(at: tmp.store("a")))
        await reopened.close()
    }

    /// The id index lists events under the first 8 bytes of their ids
    /// (Specs/storage.md §3): a lookup checks each event listed under the
    /// prefix, so another event listed there (as when two ids share 8
    /// bytes) is passed over, and an id that only shares the prefix is not
    /// found.
    @Test func anIDLookupChecksEachEventListedUnderItsPrefix() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        for i in 0..<3 { try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("\(i)")) }
        let events = try node.feed(node.identity.device.raw)
        let (other, target) = (events[1], events[3])
        #expect(other.arrival < target.arrival)  // listed first under the prefix below
        let env = node.log.env
        // A few events: all in the id index's recent level (§5.3).
        let ids = try env.openDatabase(LogStore.recentIDsName, fixedSizeDuplicates: true)
        try env.write { txn in
            try txn.putDuplicate(ids, Array(target.event.id.bytes[0..<8]), LogStore.encodeU64(other.arrival), last: false)
        }
        #expect(try env.read { try node.log.readArrival(of: target.event.id, in: $0) } == target.arrival)
        #expect(try node.log.event(target.event.id)?.event == target.event)
        #expect(try node.log.event(other.event.id)?.arrival == other.arrival)
        var sharingThePrefix = target.event.id.bytes
        sharingThePrefix[31] ^= 1
        #expect(try node.log.event(try #require(Bytes32(sharingThePrefix))) == nil)
        // The same event again is found, and so a duplicate.
        let again = await node.ingest([target.event.encoded()])
        #expect(again.duplicates == 1)
        // The extra entry names an arrival whose event has another prefix.
        let stored = try node.log.eventCount()
        #expect(
            try node.log.integrityProblems() == [
                "the id index lists arrival \(other.arrival) under \(Hex.encode(Array(target.event.id.bytes[0..<8]))), which holds no event with an id starting so",
                "\(stored) events stored but \(stored + 1) in the id index",
            ])
        await node.close()
    }

    /// The id index's two levels (Specs/storage.md §3, §5.3): a commit
    /// lists its events in the recent level, and then moves the recent
    /// level's excess over its target (at least the minimum, or an eighth
    /// of the main level) into the main level, in key order from after the
    /// entry the last move ended with, going round at the end. After every
    /// commit each event is found by id, in whichever level lists it, and
    /// the audit finds the index whole.
    /// A whole-log reader takes an event's id from the next event of its
    /// feed where that follows it in the log (`forEachTrusted`), and hashes
    /// the header elsewhere: every id it hands on is the event's own, for
    /// feeds stored in runs, interleaved one by one, and cut by the ends of
    /// the range read.
    @Test func aWholeLogReaderHandsOnEveryEventWithItsOwnID() throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        try FileManager.default.createDirectory(atPath: tmp.store("ids"), withIntermediateDirectories: true)
        let env = try Environment(path: tmp.store("ids"))
        let log = try LogStore(env: env)
        var feeds = [FeedWriter(seedByte: 1), FeedWriter(seedByte: 2), FeedWriter(seedByte: 3)]
        var order: [Event] = []
        for run in 0..<12 {
            // A run of one feed, then the feeds one event each.
            for _ in 0..<(1 + run % 4) { order.append(feeds[run % 3].next("run \(run)")) }
            for f in feeds.indices { order.append(feeds[f].next("turn \(run).\(f)")) }
        }
        try env.write { txn in
            var context = try log.appendContext(in: txn, nowMillis: 1_800_000_000_000, driftMillis: 60_000)
            for e in order {
                guard case .accepted = try log.append(e, in: txn, context: &context) else { throw TestFailure("not accepted") }
            }
            try log.finish(&context, in: txn)
        }
        let count = UInt64(order.count)
        for range in [1...count, 2...(count - 1), 5...5, 7...8] {
            var seen: [UInt64] = []
            try log.forEachTrusted(arrivals: range) { arrival, event in
                seen.append(arrival)
                let expected = order[Int(arrival) - 1]
                #expect(event.id == expected.id && event.id == Event.computeID(headerBytes: event.headerBytes))
                #expect(event.headerBytes == expected.headerBytes && event.payloadBytes == expected.payloadBytes)
            }
            #expect(seen == Array(range))
        }
    }

    @Test func theIDIndexMovesItsRecentLevelIntoTheMainOneARangeAtATime() throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        try FileManager.default.createDirectory(atPath: tmp.store("levels"), withIntermediateDirectories: true)
        let env = try Environment(path: tmp.store("levels"))
        let log = try LogStore(env: env, recentIDsMinimum: 5)
        var feeds = [FeedWriter(seedByte: 1), FeedWriter(seedByte: 2)]
        var stored: [Event] = []
        var expected = (main: 0, recent: 0)
        var moves = 0
        var wentRound = false
        func cursor() throws -> [UInt8]? { try env.read { txn in try txn.get(log.meta, LogStore.idsMovedKey) } }
        for commit in 0..<40 {
            // Commits of 1 to 4 events, from both feeds.
            let batch = (0..<(1 + commit % 4)).map { i in feeds[i % 2].next("\(commit).\(i)") }
            let before = try cursor()
            try env.write { txn in
                var context = try log.appendContext(in: txn, nowMillis: 1_800_000_000_000, driftMillis: 60_000)
                for e in batch {
                    guard case .accepted = try log.append(e, in: txn, context: &context) else { throw TestFailure("not accepted") }
                }
                try log.finish(&context, in: txn)
            }
            stored += batch
            expected.recent += batch.count
            let target = max(5, expected.main / 8)
            if expected.recent > target {
                (expected.main, expected.recent) = (expected.main + expected.recent - target, target)
                moves += 1
            }
            let levels = try env.read { txn in (main: try txn.count(log.ids), recent: try txn.count(log.recentIDs)) }
            #expect(levels == expected, "after commit \(commit)")
            if let before, let after = try cursor(), after.lexicographicallyPrecedes(before) { wentRound = true }
            for (position, e) in stored.enumerated() {
                #expect(try log.event(e.id)?.arrival == UInt64(position + 1))
            }
            #expect(try log.integrityProblems().isEmpty)
        }
        // Both targets decided some moves: the minimum at first, then the
        // ratio; and the moves went round the end of the key space.
        #expect(moves >= 10 && expected.main > 5 * 8)
        #expect(wentRound)
        // An event listed in both levels is damage the audit names.
        let first = try #require(stored.first)
        let listed = try env.read { txn in try txn.firstDuplicate(log.ids, Array(first.id.bytes[0..<8]), from: LogStore.encodeU64(0)) }
        let other = listed != nil ? log.recentIDs : log.ids
        try env.write { txn in try txn.putDuplicate(other, Array(first.id.bytes[0..<8]), LogStore.encodeU64(1), last: false) }
        #expect(try log.integrityProblems() == ["\(stored.count) events stored but \(stored.count + 1) in the id index"])
    }

    @Test func aStoreOfANewerFormatIsRefused() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        await node.close()
        do {
            let env = try Environment(path: tmp.store("a"))
            let meta = try env.openDatabase("meta")
            try env.write { txn in try txn.put(meta, Array("format".utf8), LogStore.encodeU64(LogStore.formatVersion + 1)) }
        }
        do {
            _ = opened(try await Node.open(at: tmp.store("a")))
            Issue.record("opened a newer store")
        } catch let error as LogError {
            #expect("\(error)".contains("newer"))
        }
    }

    /// Projections from before format 12 have no `facts_recent` (Specs/projections.md
    /// §9.1). A read-only open says they are stale, as for any older
    /// projections, instead of failing in LMDB; a read-write open rebuilds
    /// them, with the same digest.
    @Test func projectionsWithoutTheRecentFactsAreStaleReadOnlyAndRebuiltReadWrite() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("before"))
        let digest = try node.projections.digest()
        await node.close()
        do {
            // As a format 11 build left them: one level of facts.
            let env = try Environment(path: tmp.store("a"))
            let projections = try Store(env: env, config: NetworkConfig()).projections
            try env.write { txn in
                var moved: [([UInt8], [UInt8])] = []
                try txn.scan(projections.recentFacts) { key, value in
                    moved.append((key, value))
                    return true
                }
                for (key, value) in moved { try txn.put(projections.facts, key, value) }
                try txn.drop(projections.recentFacts)
                try txn.put(projections.index, Projections.builtKey, Codec.u64(11) + NetworkConfig().fingerprint.bytes)
            }
        }
        await #expect(throws: NodeError.projectionsStale(path: tmp.store("a"))) { _ = opened(try await Node.open(at: tmp.store("a"), readOnly: true)) }
        let reopened = opened(try await Node.open(at: tmp.store("a")))
        #expect(try reopened.projections.isCurrent())
        #expect(try reopened.projections.digest() == digest)
        await reopened.close()
    }

    @Test("a missing store is a typed error whose message speaks of the library, not of CLI commands (the CLI adds those)")
    func missingStoreIsATypedError() async throws {
        do {
            _ = opened(try await Node.open(at: "/nonexistent/chorus"))
            Issue.record("opened a missing store")
        } catch let error as NodeError {
            #expect(error == .notInitialized(path: "/nonexistent/chorus"))
            #expect(!"\(error)".contains("chorus init") && !"\(error)".contains("--store"))
        }
    }

    @Test func theMapGrowsInsteadOfFailing() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig(), options: options(mapSize: 64 << 10)))
        let start = node.log.env.mapSize
        let big = String(repeating: "y", count: 900)
        for i in 0..<400 { try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("\(i) \(big)")) }
        #expect(node.log.env.mapSize > start)
        #expect(try node.feed(node.identity.device.raw).count == 1 + 400)  // the device.key, then the edits
        #expect(try node.log.integrityProblems() == [])
        await node.close()
    }

    @Test func invalidLocalPayloadsAreRefusedBeforeSigning() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        await #expect(throws: EventError.self) {
            try await node.append(.profileSet, object: node.identity.user.raw,
                                  payload: .textMap([("field", .text("birthday")), ("value", .text("yesterday"))]))
        }
        // The failed attempt did not consume a sequence number (seq 1 is the device.key).
        let ok = try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("fine"))
        #expect(ok.seq == 2)
        await node.close()
    }

    @Test func arrivalLogAnswersWhatIsNew() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let mark = try node.lastArrival()
        for i in 0..<5 { try await node.append(.profileSet, object: node.identity.user.raw, payload: bio("\(i)")) }
        let new = try node.arrivals(since: mark)
        #expect(new.map(\.arrival) == Array((mark + 1)...(mark + 5)))
        #expect(try node.arrivals(since: mark, limit: 2).count == 2)
        #expect(try node.arrivals(since: mark + 5).isEmpty)
        // Who wrote since a position, from the headers alone, in pages.
        let user = node.identity.user.raw
        let device = node.identity.device.raw
        let all = try node.log.authorsArrived(since: 0, limit: .max)
        #expect(all.authors == [user, device] && all.last == mark + 5 && all.read == Int(mark) + 5)
        let page = try node.log.authorsArrived(since: mark, limit: 2)
        #expect(page.authors == [device] && page.last == mark + 2 && page.read == 2)
        let rest = try node.log.authorsArrived(since: page.last, limit: 10)
        #expect(rest.read == 3 && rest.last == mark + 5)
        #expect(try node.log.authorsArrived(since: mark + 5, limit: 10) == ([], mark + 5, 0))
        await node.close()
    }

    @Test func receivedBlobsAreStoredOnlyWhileReferencedAndOnce() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let b = opened(try await Node.create(at: tmp.store("b"), network: NetworkConfig()))
        let bytes = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let picture = try await a.addPicture(bytes, mime: "image/png").object
        // B learns of the picture without its bytes, as a sync delivers events before blobs.
        let events = try a.arrivals().map(\.event)
        #expect(await b.ingest(events: events).accepted == events.count)
        let hash = Blake2b.hash256(bytes)
        #expect(try b.blobs.read(hash) == nil)
        let unreferenced = [UInt8](repeating: 7, count: 100)
        #expect(try await b.storeReceivedBlob(unreferenced, hash: Blake2b.hash256(unreferenced)) == false)
        #expect(try await b.storeReceivedBlob(bytes, hash: hash) == true)
        #expect(try await b.storeReceivedBlob(bytes, hash: hash) == false)
        #expect(try b.blobs.read(hash) == bytes)
        // A deleted picture's bytes are not taken in again.
        _ = try await a.deletePicture(picture)
        let c = opened(try await Node.create(at: tmp.store("c"), network: NetworkConfig()))
        let all = try a.arrivals().map(\.event)
        #expect(await c.ingest(events: all).accepted == all.count)
        #expect(try await c.storeReceivedBlob(bytes, hash: hash) == false)
        #expect(try c.blobs.read(hash) == nil)
        await a.close()
        await b.close()
        await c.close()
    }

    @Test func storageErrorsSayWhatHappenedAndWhatToDo() {
        for (code, expected) in [
            (ENOSPC, StorageError.diskFull(operation: "commit")), (EDQUOT, .diskFull(operation: "commit")),
            (EIO, .writeFailed(operation: "commit")),
        ] {
            #expect(throws: expected) { try StorageError.check(code, "commit") }
        }
        #expect(StorageError.diskFull(operation: "commit").description.contains("Free some space and retry"))
        #expect(StorageError.writeFailed(operation: "commit").description.contains("nothing from this write was acknowledged"))
    }

    /// A real full disk: a 2 MiB tmpfs (needs root, as CI has; skipped elsewhere).
    @Test(.enabled(if: getuid() == 0, "mounting a small tmpfs needs root"))
    func aFullDiskRefusesTheWriteAndKeepsEverythingAcknowledged() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let mountPoint = tmp.store("tiny")
        try await withSmallDisk(at: mountPoint, size: "2m") {
            let store = mountPoint + "/store"
            let node = opened(try await Node.create(at: store, network: NetworkConfig()))
            var acknowledged: [PictureID] = []
            var failure: (any Error)? = nil
            for i in 0..<40 {
                let bytes = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) }
                do {
                    acknowledged.append(try await node.addPicture(bytes, mime: "image/png").object)
                } catch {
                    failure = error
                    break
                }
            }
            let error = try #require(failure, "2 MiB never filled up")
            #expect(!acknowledged.isEmpty)
            let storage = error as? StorageError
            #expect(storage == .diskFull(operation: "mdb_txn_commit") || storage == .writeFailed(operation: "mdb_txn_commit"),
                "\(error)")
            // The node still answers; everything acknowledged is there after reopening, and the log is intact.
            #expect(try node.projections.pictures(of: node.identity.user).count == acknowledged.count)
            await node.close()
            let reopened = opened(try await Node.open(at: store, readOnly: true))
            #expect(try reopened.log.integrityProblems().isEmpty)
            let ids = Set(try reopened.projections.pictures(of: reopened.identity.user).map(\.id))
            #expect(ids == Set(acknowledged))
            await reopened.close()
        }
    }
}

@Suite("Node: batch append", .closingNodes)
struct BatchAppendTests {
    @Test func aBatchIsChainedInOrderAndDurableInFewCommits() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let before = node.writerStatistics.commits
        let items = (0..<3000).map { PendingEvent(ProfileSetPayload(field: .bio, value: .text("batch \($0)")), object: node.identity.user.raw) }
        let events = try await node.appendBatch(items)
        #expect(events.count == 3000)
        // seq 1 is the device.key; the batch follows it in order.
        #expect(events.map(\.seq) == Array(2...3001))
        let feed = try node.feed(node.identity.device.raw)
        #expect(feed.dropFirst().map(\.event.id) == events.map(\.id))
        #expect(node.writerStatistics.commits - before <= 3000 / 64)
        #expect(try node.projections.profile(node.identity.user).field("bio") == .text("batch 2999"))
        #expect(try node.log.integrityProblems() == [])
        // An invalid item refuses the whole batch before anything is signed.
        let bad = [PendingEvent(ProfileSetPayload(field: .birthday, value: .text("yesterday")), object: node.identity.user.raw)]
        await #expect(throws: EventError.self) { try await node.appendBatch(items.prefix(2) + bad) }
        #expect(try node.feed(node.identity.device.raw).count == 3001)
        #expect(try await node.append(ProfileSetPayload(field: .city, value: .text("Porto")), object: node.identity.user.raw).seq == 3002)
        await node.close()
    }

    /// A commit of thousands of events is followed by one that releases the
    /// pages it freed (Specs/storage.md §5.1 step 8); a local append's
    /// commit is not, so its latency keeps one flush.
    @Test func aLargeCommitReleasesTheFreedPagesAndASmallOneDoesNot() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let env = node.log.env
        var (txn, commits) = (try env.transactionAndFilePages().lastTransaction, node.writerStatistics.commits)
        _ = try await node.append(ProfileSetPayload(field: .city, value: .text("Porto")), object: node.identity.user.raw)
        #expect(node.writerStatistics.commits == commits + 1)
        let afterAppend = try env.transactionAndFilePages().lastTransaction
        #expect(afterAppend == txn + 1, "transactions \(txn) then \(afterAppend)")

        // Another node's 5,000 events, received in one call: one commit.
        let other = opened(try await Node.create(at: tmp.store("b"), network: NetworkConfig()))
        let items = (0..<5_000).map { PendingEvent(ProfileSetPayload(field: .bio, value: .text("v\($0)")), object: other.identity.user.raw) }
        try await other.appendBatch(items)
        let envelopes = try other.arrivals().map { $0.event.encoded() }
        await other.close()
        (txn, commits) = (try env.transactionAndFilePages().lastTransaction, node.writerStatistics.commits)
        let report = await node.ingest(envelopes)
        #expect(report.results.allSatisfy { if case .accepted = $0 { true } else { false } })
        #expect(node.writerStatistics.commits == commits + 1)
        #expect(node.writerStatistics.largestBatch >= Store.largeCommit)
        let afterIngest = try env.transactionAndFilePages().lastTransaction
        #expect(afterIngest == txn + 2, "transactions \(txn) then \(afterIngest), commits \(commits) then \(node.writerStatistics.commits)")
        #expect(try node.projections.profile(other.identity.user).field("bio") == .text("v4999"))
        await node.close()
    }

    @Test func anIssuerCreditsManyReceiptsAtOnceAndADuplicateCountsOnce() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let shopStore = tmp.store("shop")
        await (opened(try await Node.create(at: shopStore, network: NetworkConfig()))).close()
        let issuer = try Node.createIssuer(at: shopStore)
        let network = NetworkConfig(issuers: [issuer])
        let shop = opened(try await Node.open(at: shopStore))
        let buyer = opened(try await Node.create(at: tmp.store("buyer"), network: network))
        _ = await shop.ingest(try buyer.arrivals().map { $0.event.encoded() })
        var credits = (0..<200).map { Node.Credit(user: buyer.identity.user, amount: 5, receipt: "tx-\($0)") }
        credits.append(Node.Credit(user: buyer.identity.user, amount: 5, receipt: "tx-7"))  // redelivered
        let events = try await shop.creditCoins(credits)
        #expect(events.count == 201)
        #expect(try shop.projections.noEffect(events[200].id)?.code == "duplicate_receipt")
        #expect(events[200].effect.code == "duplicate_receipt" && events.prefix(200).allSatisfy(\.isApplied))
        #expect(try shop.projections.balance(of: buyer.identity.user).total == 1000)
        await shop.close()
        await buyer.close()
    }

    @Test("a network and its issuer in one call; nodes join from the invite; stores at file URLs; pictures from Data")
    func oneCallNetworkURLsAndData() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let (shop, network) = try await Node.createNetwork(at: URL(fileURLWithPath: tmp.store("shop")), slotPrices: [0, 40])
        opened(shop)
        #expect(network.issuers.count == 1 && network.slotPrices == [0, 40])
        let joined = try NetworkConfig(invite: network.invite)
        #expect(joined.fingerprint == network.fingerprint)
        let buyerURL = URL(fileURLWithPath: tmp.store("buyer"))
        let buyer = opened(try await Node.create(at: buyerURL, network: joined))
        _ = await shop.ingest(try buyer.arrivals().map { $0.event.encoded() })
        let credit = try await shop.creditCoins(50, to: buyer.identity.user, receipt: "r-1")
        #expect(credit.isApplied)
        _ = await buyer.ingest(try shop.arrivals().map { $0.event.encoded() })
        #expect(try buyer.projections.balance(of: buyer.identity.user).total == 50)
        let picture = try await buyer.addPicture(Data([0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3]))
        #expect(picture.isApplied)
        await buyer.close()
        let reopened = opened(try await Node.open(at: buyerURL))
        #expect(try reopened.projections.pictures(of: reopened.identity.user).map(\.id) == [picture.object])
        await #expect(throws: NodeError.notAFileURL("https://example.com/store")) {
            _ = opened(try await Node.create(at: URL(string: "https://example.com/store")!, network: NetworkConfig()))
        }
        await reopened.close()
        await shop.close()
    }

    @Test("a store already open in this process is refused, read-only or not, until the node holding it closes")
    func secondOpenInTheSameProcess() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let path = tmp.store("a")
        let node = opened(try await Node.create(at: path, network: NetworkConfig()))
        await #expect(throws: StorageError.alreadyOpenInProcess(path: path)) { _ = opened(try await Node.open(at: path)) }
        await #expect(throws: StorageError.alreadyOpenInProcess(path: path)) { _ = opened(try await Node.open(at: path, readOnly: true)) }
        // Another path to the same directory is the same store.
        await #expect(throws: StorageError.alreadyOpenInProcess(path: path + "/.")) { _ = opened(try await Node.open(at: path + "/.", readOnly: true)) }
        await node.close()
        let again = opened(try await Node.open(at: path, readOnly: true))
        #expect(try again.log.eventCount() >= 1)
        await again.close()
    }

    @Test("typed profile edits and reads: text fields, a birthday, an avatar, clearing; an incomplete date is refused")
    func typedProfile() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 3, count: 40)
        let picture = try await node.addPicture(png).object
        try await node.setProfile(.name("Ana"))
        try await node.setProfile(.city("Lisbon"))
        try await node.setProfile(.birthday(DateComponents(year: 1990, month: 2, day: 3)))
        try await node.setProfile(.avatar(picture))
        var profile = try node.projections.profile(node.identity.user)
        #expect(profile.name == "Ana" && profile.city == "Lisbon")
        #expect(profile.birthday == DateComponents(year: 1990, month: 2, day: 3))
        #expect(profile.avatar?.id == picture)
        try await node.setProfile(.clear(.city))
        profile = try node.projections.profile(node.identity.user)
        #expect(profile.city == nil && profile.name == "Ana")
        await #expect(throws: NodeError.refused(.incompleteDate)) { try await node.setProfile(.birthday(DateComponents(month: 2))) }
        await node.close()
    }

    @Test("a chat list read again decrypts only what changed, and shows the change")
    func openedContentIsKeptUntilItChanges() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let (node, _) = try await Node.createNetwork(at: tmp.store("alice"))
        opened(node)
        let chat = try await node.createChat(title: "roofs").object
        let message = try await node.sendMessage(chat, text: "first").object
        func openings() -> Int { node.openedContent.openings.load(ordering: .relaxed) }
        let first = try node.chatList()
        #expect(first.first?.chat.title?.value == "roofs" && first.first?.lastMessage?.content.value?.text == "first")
        let opened = openings()
        #expect(opened == 2, "the title and the message")
        #expect(try node.chatList() == first)
        #expect(openings() == opened, "nothing changed, so nothing is decrypted again")
        // An edit is a new sealed value: it is opened (with the message as
        // first sent, whose picture and attachment it keeps), then kept too.
        _ = try await node.editMessage(message, text: "edited")
        #expect(try node.chatList().first?.lastMessage?.content.value?.text == "edited")
        let afterEdit = openings()
        #expect(afterEdit == opened + 1, "the edit; the original is still kept")
        #expect(try node.readableChatPage(chat).messages.map { $0.content.value?.text } == ["edited"])
        #expect(openings() == afterEdit)
        // Past the capacity, the oldest values are forgotten and opened again when read.
        let cache = OpenedContent(capacity: 2)
        let inputs = (0..<5).map { OpenedContent.Input.sent(EventID([UInt8](repeating: UInt8($0), count: 32))!) }
        for (i, input) in inputs.enumerated() { cache.put(input, i) }
        #expect(cache.get(inputs[0]) == nil && cache.get(inputs[4]) as? Int == 4 && cache.get(inputs[3]) as? Int == 3)
        await node.close()
    }

    @Test("every mutation says whether it took effect, and what it created")
    func mutationsReportTheirEffect() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let (shop, network) = try await Node.createNetwork(at: tmp.store("shop"))
        opened(shop)
        let buyer = opened(try await Node.create(at: tmp.store("buyer"), network: network))
        _ = await shop.ingest(try buyer.arrivals().map { $0.event.encoded() })

        let first = try await shop.creditCoins(30, to: buyer.identity.user, receipt: "GPA.0001")
        let again = try await shop.creditCoins(30, to: buyer.identity.user, receipt: "GPA.0001")
        #expect(first.effect == .applied && first.kind == .coinCredited)
        guard case .noEffect(let why) = again.effect else {
            Issue.record("a redelivered receipt took effect")
            return
        }
        #expect(why.code == "duplicate_receipt" && why.detail.contains("GPA.0001"))
        #expect(again.id != first.id && again.object == first.object)

        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 100)
        let picture = try await buyer.addPicture(png)
        #expect(picture.isApplied && picture.kind == .pictureCreated)
        if case .live = try buyer.projections.picture(picture.object) {} else { Issue.record("the new picture is not live") }
        let chat = try await buyer.createChat(title: "t")
        let view = try buyer.projections.chatView(chat.object)
        #expect(chat.kind == .chatCreated && chat.isApplied && view != nil)
        let message = try await buyer.sendMessage(chat.object, text: "hello")
        let stored = try buyer.projections.message(message.id)
        #expect(message.event.object == chat.object.raw && stored != nil)
        await shop.close()
        await buyer.close()
    }
}

@Suite("Node: opening a stale store", .closingNodes)
struct StaleOpenTests {
    @Test func aRebuildOnOpenReportsProgressCanBeCancelledAndResumesOnTheNextOpen() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let path = tmp.store("a")
        let node = opened(try await Node.create(at: path, network: NetworkConfig()))
        let items = (0..<25_000).map { PendingEvent(ProfileSetPayload(field: .bio, value: .text("v\($0)")), object: node.identity.user.raw) }
        try await node.appendBatch(items)
        let digest = try node.projections.digest()
        try node.projections.markStale()
        await node.close()

        // Cancelled: the open throws CancellationError and leaves the store stale.
        let cancelled = Task { opened(try await Node.open(at: path)) }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { _ = try await cancelled.value }

        // The next open rebuilds, reporting progress, to the same state.
        let seen = Mutex<[Int]>([])
        let told = Mutex<[(Staleness, Int)]>([])
        var options = NodeOptions()
        options.rebuildProgress = { done, total in
            #expect(total >= 25_000)
            seen.withLock { $0.append(done) }
        }
        options.onRebuild = { why, events in told.withLock { $0.append((why, events)) } }
        let reopened = opened(try await Node.open(at: path, options: options))
        #expect(try reopened.projections.digest() == digest)
        let reports = seen.withLock { $0 }
        let count = try reopened.log.eventCount()
        #expect(reports.count >= 2 && reports == reports.sorted() && reports.last == count)
        // Told once, before it began, why and over how many events.
        #expect(told.withLock { $0.map(\.0) } == [.neverBuilt] && told.withLock { $0.map(\.1) } == [count])
        await reopened.close()
    }
}

#if os(Linux)
@Suite("Node: operations", .closingNodes)
struct NodeThreadTests {
    @Test("the writer and signer threads carry their names in the kernel, so top -H and perf show them")
    func threadsAreNamed() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        _ = try await node.setProfile(.bio, .text("signed and written"))
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")
        let names = Set(
            tasks.compactMap {
                try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            })
        #expect(names.contains("chorus-writer") && names.contains("chorus-signer"), "\(names.sorted())")
        await node.close()
    }
}
#endif

@Suite("Node: closing", .closingNodes)
struct NodeClosingTests {
    @Test func closeReleasesTheStoreSoItReopensInTheSameProcessAndLaterReadsSaySo() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.store("a")
        let node = opened(try await Node.create(at: path, network: NetworkConfig()))
        _ = try await node.setProfile(.bio, .text("before closing"))
        let me = node.identity.user
        await node.close()
        await node.close()  // idempotent
        #expect(throws: StorageError.closed) { _ = try node.projections.profile(me) }
        await #expect(throws: (any Error).self) { _ = try await node.setProfile(.bio, .text("after closing")) }

        // The same path opens again in this process (one LMDB environment per file) and holds what was written.
        let again = opened(try await Node.open(at: path))
        #expect(try again.projections.profile(me).field("bio") == .text("before closing"))
        _ = try await again.setProfile(.bio, .text("reopened"))
        #expect(try again.projections.profile(me).field("bio") == .text("reopened"))
        await again.close()
    }
}

@Suite("Node: typed refusals", .closingNodes)
struct RefusalTests {
    @Test func anAppBranchesOnWhyAMutationWasRefused() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("a"), network: NetworkConfig()))
        let me = node.identity.user
        await #expect(throws: NodeError.refused(.insufficientRights(held: 0, needed: 30))) {
            _ = try await node.spendCoins(30, for: "sticker pack")
        }
        await #expect(throws: NodeError.refused(.cannotFollowYourself)) { _ = try await node.follow(me) }
        await #expect(throws: NodeError.refused(.notAnImage)) { _ = try await node.addPicture([1, 2, 3]).object }
        await #expect(throws: NodeError.refused(.noSuchSlot(slot: 9, lowest: 1, highest: 5))) { _ = try await node.unlockSlot(9) }
        let stranger = SigningKey.generate().publicKey
        await #expect(throws: NodeError.refused(.nothingToRemove(what: "follow", target: stranger))) { _ = try await node.unfollow(UserID(stranger)) }
        // Nothing was signed for any of them.
        #expect(try node.lastArrival() == 2)  // device.added and device.key from create
        await node.close()
    }
}
