import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("Copying databases table by table (ChorusStorage)")
struct TableCopyTests {
    typealias Entries = [(key: [UInt8], value: [UInt8])]

    static func entries(_ env: Environment, _ db: Database) throws -> Entries {
        try env.read { txn in
            var all: Entries = []
            try txn.scan(db) { key, value in
                all.append((key, value))
                return true
            }
            return all
        }
    }

    static func duplicates(_ env: Environment, _ db: Database, keys: [[UInt8]]) throws -> [[UInt8]: [[UInt8]]] {
        try env.read { txn in
            var all: [[UInt8]: [[UInt8]]] = [:]
            for key in keys {
                try txn.scanDuplicates(db, key, from: [UInt8](repeating: 0, count: 16)) { value in
                    all[key, default: []].append(value)
                    return true
                }
            }
            return all
        }
    }

    /// Many small commits (and, from a 1 MiB map, the map grown and a
    /// commit run again) copy every entry: plain values of every size up to
    /// several pages, a key's duplicates across a commit boundary, and a
    /// database that already had entries keeps them, copied values winning.
    @Test(arguments: [UInt64(1), 2, 3])
    func copiesEveryEntryInOrder(seed: UInt64) throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        var random = SplitMix64(seed: seed)
        let source = try dir.freshEnvironment("source", initialMapSize: 64 << 20)
        let plain = try source.openDatabase("plain")
        let dups = try source.openDatabase("dups", fixedSizeDuplicates: true)
        let shared = try source.openDatabase("shared")
        var dupKeys: [[UInt8]] = []
        try source.write { txn in
            for _ in 0..<3_000 {
                let key = (0..<Int.random(in: 1...40, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                let size = Int.random(in: 0...100, using: &random) == 0 ? Int.random(in: 4_000...20_000, using: &random) : Int.random(in: 0...300, using: &random)
                try txn.put(plain, key, (0..<size).map { _ in UInt8.random(in: 0...255, using: &random) })
            }
            for k in 0..<50 {
                let key = Array("author-\(k)".utf8)
                dupKeys.append(key)
                for _ in 0..<Int.random(in: 1...400, using: &random) {
                    try txn.putDuplicate(dups, key, (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }, last: false)
                }
            }
            for k in 0..<100 { try txn.put(shared, [UInt8(k)], [1]) }
        }

        let target = try dir.freshEnvironment("target")
        let before = try target.openDatabase("shared")
        try target.write { txn in
            try txn.put(before, [0], [9])  // replaced by the copy
            try txn.put(before, [200], [9])  // kept
        }
        var reported: [Int] = []
        let copied = try target.copyDatabases(["plain", "absent", "dups", "shared"], from: source, bytesPerCommit: 8_192) { reported.append($0) }
        #expect(target.mapSize > 1 << 20)  // grown: a commit was run again
        #expect(reported.count > 100 && reported == reported.sorted() && reported.last == copied)

        #expect(try Self.entries(target, try target.openDatabase("plain")).elementsEqual(try Self.entries(source, plain)) { $0 == $1 })
        let copiedDups = try target.openDatabase("dups", fixedSizeDuplicates: true)
        #expect(try Self.duplicates(target, copiedDups, keys: dupKeys) == (try Self.duplicates(source, dups, keys: dupKeys)))
        #expect(try target.read { txn in try txn.count(copiedDups) } == (try source.read { txn in try txn.count(dups) }))
        let sharedAfter = try Self.entries(target, before)
        #expect(sharedAfter.count == 101 && sharedAfter.first! == ([0], [1]) && sharedAfter.last! == ([200], [9]))
        #expect(throws: (any Error).self) { _ = try target.read { txn in try txn.get(try target.openDatabase("absent", create: false), [0]) } }
    }

    /// `dropDatabases(keeping:)` deletes the other named databases with
    /// their entries, and `databaseNames()` lists what is left.
    @Test func dropsEveryDatabaseButThoseKept() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let env = try dir.freshEnvironment("drop", initialMapSize: 8 << 20)
        for name in ["b", "a", "c"] {
            let db = try env.openDatabase(name)
            try env.write { txn in for k in 0..<300 { try txn.put(db, Array("\(name)\(k)".utf8), [UInt8](repeating: 7, count: 200)) } }
        }
        #expect(try env.databaseNames() == ["a", "b", "c"])
        try env.dropDatabases(keeping: ["b", "absent"])
        #expect(try env.databaseNames() == ["b"])
        #expect(try env.read { txn in try txn.count(try env.openDatabase("b", create: false)) } == 300)
        #expect(throws: StorageError.self) { _ = try env.openDatabase("a", create: false) }
        try env.dropDatabases(keeping: ["b"])  // nothing else left: no write
        #expect(try env.databaseNames() == ["b"])
    }

    /// The whole environment copied page for page is the snapshot asked
    /// for, or, when a commit came between that snapshot and the copy's,
    /// nothing at all (the caller copies table by table instead).
    @Test func copiesTheWholeEnvironmentOnlyAsOfTheSnapshot() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let source = try dir.freshEnvironment("source", initialMapSize: 8 << 20)
        let db = try source.openDatabase("plain")
        try source.write { txn in for k in 0..<2_000 { try txn.put(db, Array("key-\(k)".utf8), [UInt8](repeating: UInt8(k % 251), count: 100)) } }

        try FileManager.default.createDirectory(atPath: dir.store("whole"), withIntermediateDirectories: true)
        #expect(try source.read { snapshot in try source.copyWhole(to: dir.store("whole"), asOf: snapshot) })
        let mode = try FileManager.default.attributesOfItem(atPath: dir.store("whole") + "/data.mdb")[.posixPermissions] as? Int
        #expect(mode == 0o600)  // as a store's own data file
        let whole = try Environment(path: dir.store("whole"))
        #expect(try Self.entries(whole, try whole.openDatabase("plain", create: false)).elementsEqual(try Self.entries(source, db)) { $0 == $1 })
        whole.close()

        try FileManager.default.createDirectory(atPath: dir.store("later"), withIntermediateDirectories: true)
        let copied = try source.read { snapshot in
            try source.write { txn in try txn.put(db, Array("after the snapshot".utf8), [1]) }
            return try source.copyWhole(to: dir.store("later"), asOf: snapshot)
        }
        #expect(!copied)
        #expect(!FileManager.default.fileExists(atPath: dir.store("later") + "/data.mdb"))
    }
}
