import ChorusLog
import ChorusStorage
import ChorusNode
import Foundation
import ChorusTestSupport
import Testing

/// `Tests/Fixtures/store-format-1`, `-2` and `-3` are Alice's phone
/// store at the end of `Tools/demo.sh`, written by the builds before store
/// formats 2, 3 and 4 (pictures, a purged picture, blobs, an encrypted chat,
/// coins, slots). Their `log.json` and `digest.txt` are what those builds
/// printed for them.
@Suite("store format upgrade")
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

    @Test(arguments: [1, 2, 3])
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
        await #expect(throws: LogError.self) { _ = try await Node.open(at: store) }
        #expect(try await Node.upgrade(at: store))
        let node = try await Node.open(at: store)
        #expect(try node.projections.digest().hex == (try fixtureText("digest.txt", format: format)))
        #expect(try node.lastArrival() == 40)
        #expect(try node.log.integrityProblems().isEmpty)
        await node.close()
    }
}
