import ChorusLog
import ChorusStorage
import ChorusNode
import Foundation
import ChorusTestSupport
import Testing

/// `Tests/Fixtures/store-format-1` to `-4` are Alice's phone
/// store at the end of `Tools/demo.sh`, written by the builds before store
/// formats 2, 3, 4 and 5 (pictures, a purged picture, blobs, an encrypted chat,
/// coins, slots). Their `log.json` and `digest.txt` are what those builds
/// printed for them.
@Suite("store format upgrade", .closingNodes)
struct UpgradeTests {
    let chorus: String
    init() throws { chorus = try productPath("chorus") }

    static func fixture(_ format: Int) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/store-format-\(format)").path
    }

    /// A private copy of the fixture with the modes a store has (git keeps none of them).
    func copyOfFixture(_ dir: TempDir, format: Int) throws -> String {
        let fixture = Self.fixture(format)
        let store = dir.store("phone")
        let fm = FileManager.default
        try fm.createDirectory(atPath: store + "/keys", withIntermediateDirectories: true)
        for file in ["data.mdb", "network.json"] { try fm.copyItem(atPath: fixture + "/" + file, toPath: store + "/" + file) }
        for key in try fm.contentsOfDirectory(atPath: fixture + "/keys") {
            try fm.copyItem(atPath: fixture + "/keys/" + key, toPath: store + "/keys/" + key)
            try fm.setAttributes([.posixPermissions: 0o600], ofItemAtPath: store + "/keys/" + key)
        }
        try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: store + "/keys")
        try fm.setAttributes([.posixPermissions: 0o700], ofItemAtPath: store)
        try fm.setAttributes([.posixPermissions: 0o600], ofItemAtPath: store + "/data.mdb")
        return store
    }

    func fixtureText(_ name: String, format: Int) throws -> String {
        try String(contentsOfFile: Self.fixture(format) + "/" + name, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(arguments: [1, 2, 3, 4])
    func anOldStoreSaysHowToUpgradeAndTheUpgradeKeepsEveryEventAndTheDigest(format: Int) async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = try copyOfFixture(dir, format: format)
        func fixtureText(_ name: String) throws -> String { try self.fixtureText(name, format: format) }

        // Opening it names the command that upgrades it, and writes nothing.
        let before = try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb"))
        let refused = try await runCommand(chorus, ["query", "digest", "--store", store])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("format version \(format)") && refused.stderr.contains("chorus upgrade --store \(store)"), "\(refused.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb")) == before)

        let upgraded = try await runCommand(chorus, ["upgrade", "--store", store, "--json"])
        #expect(upgraded.status == 0, "\(upgraded.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(upgraded.stdout.utf8)) as? [String: Any])
        #expect(report["upgraded"] as? Bool == true)
        #expect(report["format"] as? Int == Int(Node.storeFormat))
        #expect(report["digest"] as? String == (try fixtureText("digest.txt")))

        // Every event, its arrival position, payload or purge: the same log, byte for byte.
        let log = try await runCommand(chorus, ["log", "--store", store, "--json"])
        #expect(log.status == 0)
        #expect(log.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == (try fixtureText("log.json")))
        let digest = try await runCommand(chorus, ["query", "digest", "--store", store])
        #expect(digest.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == (try fixtureText("digest.txt")))
        // The pictures' bytes are still there.
        let pictures = try await runCommand(chorus, ["query", "pictures", "--store", store, "--json"])
        let list = try #require(try JSONSerialization.jsonObject(with: Data(pictures.stdout.utf8)) as? [[String: Any]])
        #expect(list.count == 2)
        for picture in list {
            let id = try #require(picture["id"] as? String)
            let out = dir.store("\(id).png")
            let got = try await runCommand(chorus, ["picture", "get", "--store", store, id, "--out", out])
            #expect(got.status == 0, "\(got.stderr)")
        }

        // A second run has nothing to do.
        let again = try await runCommand(chorus, ["upgrade", "--store", store])
        #expect(again.status == 0)
        #expect(again.stdout.contains("nothing to do"))
    }

    @Test(arguments: [1, 2, 3])
    func anInterruptedUpgradeResumesWhereItStopped(format: Int) async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = try copyOfFixture(dir, format: format)
        // Slices of 7 events, cancelled after the second slice committed.
        do {
            let env = try Environment(path: store)
            var slices = 0
            #expect(throws: CancellationError.self) {
                try LogStore.upgrade(env: env, sliceSize: 7, progress: { _, _ in slices += 1 }, isCancelled: { slices >= 2 })
            }
            #expect(try LogStore.format(of: env) == UInt64(format))
        }
        // Still the old format for a node; the upgrade picks up and completes.
        await #expect(throws: LogError.self) { _ = opened(try await Node.open(at: store)) }
        #expect(try await Node.upgrade(at: store))
        let node = opened(try await Node.open(at: store))
        #expect(try node.projections.digest().hex == (try fixtureText("digest.txt", format: format)))
        #expect(try node.lastArrival() == 40)
        #expect(try node.log.integrityProblems().isEmpty)
        await node.close()
    }

    @Test(arguments: [1, 2, 3])
    func theUpgradeReportsOneProgressOverAllItsSteps(format: Int) throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let env = try Environment(path: try copyOfFixture(dir, format: format))
        var reports: [(done: Int, total: Int)] = []
        try LogStore.upgrade(env: env, sliceSize: 7, progress: { reports.append(($0, $1)) })
        // Format 2 takes two steps (feed positions, then the id index),
        // each copying an entry per event; formats 1 and 3 one.
        let total = 40 * (format == 2 ? 2 : 1)
        #expect(Set(reports.map(\.total)) == [total])
        #expect(zip(reports, reports.dropFirst()).allSatisfy { $0.done < $1.done })
        #expect(reports.last?.done == total)
    }

    /// The format 4 → 5 step (Specs/storage.md §4.4) copies nothing: the
    /// events stay listed in the id index's main level, new ones go to the
    /// recent level, and both are found by id. Cancelled before it starts,
    /// it leaves format 4.
    @Test func aFormat4StoreKeepsItsIDIndexAsTheMainLevel() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = try copyOfFixture(dir, format: 4)
        do {
            let env = try Environment(path: store)
            #expect(throws: CancellationError.self) { try LogStore.upgrade(env: env, isCancelled: { true }) }
            #expect(try LogStore.format(of: env) == 4)
            var reports: [(done: Int, total: Int)] = []
            #expect(try LogStore.upgrade(env: env, progress: { reports.append(($0, $1)) }) == 4)
            #expect(try LogStore.format(of: env) == 5)
            #expect(reports.isEmpty)
            let ids = try env.openDatabase(LogStore.idsName, create: false, fixedSizeDuplicates: true)
            let recent = try env.openDatabase(LogStore.recentIDsName, create: false, fixedSizeDuplicates: true)
            #expect(try env.read { txn in [try txn.count(ids), try txn.count(recent)] } == [40, 0])
        }
        let node = opened(try await Node.open(at: store))
        let old = try node.feed(node.identity.device.raw)
        let new = try await node.append(.profileSet, object: node.identity.user.raw, payload: .textMap([("field", .text("bio")), ("value", .text("upgraded"))]))
        for e in old.map(\.event) + [new] { #expect(try node.log.event(e.id)?.event.id == e.id) }
        #expect(try node.log.integrityProblems().isEmpty)
        #expect(try node.projections.digest().hex != (try fixtureText("digest.txt", format: 4)))
        await node.close()
    }

    /// The format 3 → 4 step (Specs/storage.md §4.3) on a crafted id index:
    /// two ids that share their first 8 bytes end up side by side under
    /// that prefix, also when a slice boundary falls between them and the
    /// upgrade is interrupted there and run again.
    @Test func idsSharingAPrefixAreKeptSideBySideAcrossAnInterruption() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.store("crafted")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let env = try Environment(path: path)
        let meta = try env.openDatabase("meta")
        let old = try env.openDatabase("ids")
        func id(_ prefix: UInt8, _ last: UInt8) -> [UInt8] { [UInt8](repeating: prefix, count: 8) + [UInt8](repeating: 0, count: 23) + [last] }
        let entries: [([UInt8], UInt64)] = [(id(1, 1), 5), (id(1, 2), 2), (id(2, 1), 3), (id(3, 1), 1), (id(3, 2), 4)]
        try env.write { txn in
            try txn.put(meta, Array("format".utf8), LogStore.encodeU64(3))
            for (key, arrival) in entries { try txn.put(old, key, LogStore.encodeU64(arrival)) }
        }
        // Slices of one entry, cancelled after the first: the next run
        // starts between the two ids under prefix 1.
        var slices = 0
        #expect(throws: CancellationError.self) {
            try LogStore.upgrade(env: env, sliceSize: 1, progress: { _, _ in slices += 1 }, isCancelled: { slices >= 1 })
        }
        #expect(try LogStore.format(of: env) == 3)
        #expect(try LogStore.upgrade(env: env, sliceSize: 1) == 3)
        #expect(try LogStore.format(of: env) == LogStore.formatVersion)
        let ids = try env.openDatabase(LogStore.idsName, fixedSizeDuplicates: true)
        var listed: [[UInt8]: [UInt64]] = [:]
        try env.read { txn in
            #expect(try txn.count(ids) == entries.count)
            try txn.scan(ids) { key, value in
                listed[key, default: []].append(try LogStore.decodeU64(value, what: "arrival"))
                return true
            }
            #expect(try txn.get(meta, Array("upgrade_ids_after".utf8)) == nil)
        }
        #expect(listed == [[UInt8](repeating: 1, count: 8): [2, 5], [UInt8](repeating: 2, count: 8): [3], [UInt8](repeating: 3, count: 8): [1, 4]])
    }
}
