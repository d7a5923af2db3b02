import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("Pages a commit frees, reused by the next (ChorusStorage)")
struct FreedPagesTests {
    /// Large transactions that rewrite values under random keys free about
    /// as many pages as they write. With `releaseFreedPages` after each,
    /// the next one reuses them and the file grows less; the release
    /// commits once, changing nothing a reader sees.
    @Test func aReleaseAfterEachLargeCommitKeepsTheFileSmaller() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        func run(_ name: String, releasing: Bool) throws -> (filePages: Int, commits: Int, entries: [UInt8: [UInt8]]) {
            let env = try dir.freshEnvironment(name, initialMapSize: 64 << 20)
            let table = try env.openDatabase("table")
            let meta = try env.openDatabase("meta")
            try env.write { txn in try txn.put(meta, Array("format".utf8), [0, 0, 0, 0, 0, 0, 0, 3]) }
            let keys = (0..<20_000).map { bigEndianBytes(UInt64($0) &* 0x9E37_79B9_7F4A_7C15) }
            try env.write { txn in for k in keys { try txn.put(table, k, [UInt8](repeating: 0, count: 40)) } }
            let start = try env.transactionAndFilePages().lastTransaction
            var random = SplitMix64(seed: 7)
            for round in 1...8 {
                try env.write { txn in
                    for _ in 0..<5_000 {
                        try txn.put(table, keys[Int(random.next() % UInt64(keys.count))], [UInt8](repeating: UInt8(round), count: 40))
                    }
                }
                if releasing { try env.releaseFreedPages(rewriting: Array("format".utf8), in: meta) }
            }
            let after = try env.transactionAndFilePages()
            let format = try env.read { txn in try txn.get(meta, Array("format".utf8)) }
            #expect(format == [0, 0, 0, 0, 0, 0, 0, 3])
            let sample = try env.read { txn in
                Dictionary(uniqueKeysWithValues: try (0..<50).map { i in (UInt8(i), try txn.get(table, keys[i * 400]) ?? []) })
            }
            env.close()
            return (after.filePages, after.lastTransaction - start, sample)
        }
        let plain = try run("plain", releasing: false)
        let released = try run("released", releasing: true)
        #expect(plain.commits == 8)
        #expect(released.commits == 16)
        #expect(released.entries == plain.entries)
        // Each round frees most of the table's leaf pages; without the
        // release they wait two rounds.
        #expect(released.filePages < plain.filePages * 9 / 10, "\(released.filePages) pages against \(plain.filePages)")
    }
}
