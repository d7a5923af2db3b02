// chorus-bench pages: where a commit's page writes go, database by
// database, as the node's writer commits a store's log.
import ArgumentParser
import ChorusLog
import ChorusNode
import ChorusReplay
import ChorusStorage
import ChorusStore
import Foundation

struct PagesBenchOptions: ParsableArguments {
    @Option(help: "The store whose log is committed again (a store `chorus-bench projections --keep` left, for one).")
    var store: String
    @Option(help: "Events appended and folded per transaction (the node's writer commits about 25,000 at a time in a sync).")
    var commit = 25_000
    @Option(help: "Events to commit, from the start of the log (default: all).") var limit: Int? = nil
    @Flag(help: "Print machine-readable JSON.") var json = false
    func validate() throws {
        if commit < 1 { throw ValidationError("--commit must be at least 1") }
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
    }
}

struct PagesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pages",
        abstract: "The pages each commit writes, by database and by table, as the node's writer commits a log.",
        discussion: """
            Reads the log of an existing store in arrival order and appends and folds it into a fresh \
            store through Store.commit, --commit events a transaction, as the node's writer does. \
            After each commit it reads the data file's B-trees (LMDB's file format: the newer meta \
            page, then each database's branch, leaf and overflow pages) and counts, per database, \
            the pages in its tree that were in no tree before the commit: LMDB copies every page a \
            transaction changes to a new place, so these are the pages the commit wrote. Reports \
            the totals per database, the last commit's pages (of at least half --commit events) against the store's, and for `state`, \
            `facts` and `index` the written leaves by the first byte of their first key (the \
            table, or the object class). A diagnostic of the store's layout, not a limit ratio.
            """)
    @OptionGroup var options: PagesBenchOptions
    func run() async throws { try runPagesBenchmark(options) }
}

func runPagesBenchmark(_ options: PagesBenchOptions) throws {
    let source = try ReplayStore.open(options.store)
    let total = min(try source.log.eventCount(), options.limit ?? .max)
    let scratch = try ScratchDirectory(prefix: "chorus-bench-pages")
    let path = scratch.path + "/store"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    let store = try Store(env: try Environment(path: path, initialMapSize: 1 << 30), config: source.projections.config)
    let nowMillis = UInt64(Date().timeIntervalSince1970 * 1000)

    var written: [String: Int] = [:]
    var writtenLeaves: [String: [UInt8: Int]] = [:]
    var last: (events: Int, written: Int, inTrees: Int)? = nil
    var commits = 0
    var pageSize = 0
    var previous = Set<Int>()
    var since: UInt64 = 0
    var done = 0
    Bench.note("committing \(total) events in transactions of \(options.commit)...")
    while done < total {
        let events = try source.log.arrivals(since: since, limit: min(options.commit, total - done), trusted: true)
        guard let tail = events.last else { break }
        since = tail.arrival
        try store.commit(nowMillis: nowMillis, driftMillis: 60_000) { batch in
            for e in events {
                guard case .accepted = try batch.append(e.event) else {
                    throw ValidationError("arrival \(e.arrival) of the source was not accepted again")
                }
            }
        }
        done += events.count
        commits += 1
        let (trees, filePageSize) = try LMDBFileTrees.read(path + "/data.mdb")
        pageSize = filePageSize
        var now = Set<Int>()
        var thisCommit = 0
        for (name, tree) in trees {
            now.formUnion(tree.pages)
            let fresh = tree.pages.filter { !previous.contains($0) }
            written[name, default: 0] += fresh.count
            thisCommit += fresh.count
            for page in fresh {
                if let first = tree.leafFirstByte[page] { writtenLeaves[name, default: [:]][first, default: 0] += 1 }
            }
        }
        previous = now
        // The store's last few events (a node's own first ones) would make a tiny last commit.
        if events.count * 2 >= options.commit || last == nil { last = (events.count, thisCommit, now.count) }
        if Bench.progress { Bench.note("  \(done) events, \(commits) commits") }
    }
    let sum = written.values.reduce(0, +)
    let databases = written.sorted { $0.value > $1.value }
    let detailed = ["state", "facts", "index"]
    if options.json {
        let byDatabase: [(String, JSONValue)] = databases.map { ($0.key, .uint(UInt64($0.value))) }
        let leaves: [(String, JSONValue)] = detailed.map { name in
            let counts: [(String, JSONValue)] = (writtenLeaves[name] ?? [:]).sorted { $0.value > $1.value }.map {
                (String(format: "0x%02x", $0.key), .uint(UInt64($0.value)))
            }
            return (name, .object(counts))
        }
        let lastCommit: JSONValue = .object([
            ("events", .uint(UInt64(last?.events ?? 0))), ("pages_written", .uint(UInt64(last?.written ?? 0))),
            ("pages_in_trees", .uint(UInt64(last?.inTrees ?? 0))),
        ])
        let report: JSONValue = .object([
            ("events", .uint(UInt64(done))), ("commits", .uint(UInt64(commits))), ("page_size", .uint(UInt64(pageSize))),
            ("pages_written", .uint(UInt64(sum))), ("by_database", .object(byDatabase)), ("last_commit", lastCommit),
            ("leaves_by_first_key_byte", .object(leaves)),
        ])
        print(report.rendered())
        return
    }
    print("chorus-bench pages: \(done) events of \(options.store) in \(commits) commits of \(options.commit)")
    print(String(format: "pages written: %d (%.1f KB an event)", sum, Double(sum * pageSize) / 1000 / Double(max(1, done))))
    for (name, pages) in databases where pages > 0 {
        let padded = name.padding(toLength: 16, withPad: " ", startingAt: 0)
        print(padded + String(format: " %9d pages  %5.1f %%", pages, 100 * Double(pages) / Double(max(1, sum))))
    }
    if let last {
        print(String(format: "last commit: %d events wrote %d pages, %.0f %% of the %d pages in the trees",
            last.events, last.written, 100 * Double(last.written) / Double(max(1, last.inTrees)), last.inTrees))
    }
    for name in detailed {
        guard let leaves = writtenLeaves[name], !leaves.isEmpty else { continue }
        let line = leaves.sorted { $0.value > $1.value }.prefix(10).map { String(format: "0x%02x %d", $0.key, $0.value) }
        print("\(name) leaves written, by first key byte: " + line.joined(separator: ", "))
    }
}

/// The page numbers of every B-tree in an LMDB data file, read from the
/// file as LMDB lays it out (lmdb.h's `MDB_meta`, `MDB_page` and `MDB_node`
/// on a 64-bit little-endian build), for the `pages` diagnostic only.
struct LMDBFileTrees {
    var pages: [Int] = []
    /// A leaf page's first key byte, for the leaves that hold a key.
    var leafFirstByte: [Int: UInt8] = [:]

    static let headerSize = 16

    struct Damaged: Error, CustomStringConvertible {
        let description: String
    }

    /// Every tree of the file at `path` as its newer meta page describes it:
    /// the free list as "(free)", the main database as "(main)", and each
    /// named database by its name; and the file's page size.
    static func read(_ path: String) throws -> (trees: [String: LMDBFileTrees], pageSize: Int) {
        let data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
        return try data.withUnsafeBytes { file in
            func u16(_ at: Int) throws -> Int {
                guard at >= 0, at + 2 <= file.count else { throw Damaged(description: "read past the end of \(path) at \(at)") }
                return Int(file.loadUnaligned(fromByteOffset: at, as: UInt16.self).littleEndian)
            }
            func u32(_ at: Int) throws -> Int {
                let low = try u16(at), high = try u16(at + 2)
                return low | high << 16
            }
            // Page numbers fit in an Int; all ones (P_INVALID, an empty tree) reads as -1.
            func u64(_ at: Int) throws -> Int {
                let low = try u32(at), high = try u32(at + 4)
                return low | high << 32
            }
            // MDB_meta after the page header: magic, version, address,
            // map size, then the free and main databases (48 bytes each,
            // the root page last), the last page and the transaction id.
            let dbSize = 48
            // The page size is the free database's first field in the
            // first meta page (LMDB keeps it there), which starts the file.
            let pageSize = try u32(headerSize + 24)
            guard try u32(headerSize) == 0xBEEF_C0DE, pageSize >= 512, pageSize & (pageSize - 1) == 0 else {
                throw Damaged(description: "\(path) is not an LMDB data file (page size \(pageSize))")
            }
            var newest: (txn: Int, dbs: Int)? = nil
            for meta in 0..<2 {
                let base = meta * pageSize + headerSize
                let txn = try u64(base + 24 + 2 * dbSize + 8)
                if newest.map({ txn > $0.txn }) ?? true { newest = (txn, base + 24) }
            }
            guard let newest else { return ([:], pageSize) }
            func root(_ db: Int) throws -> Int { try u64(db + 40) }
            var subdatabases: [(name: String, db: Int)] = []
            func walk(_ root: Int, named: Bool) throws -> LMDBFileTrees {
                var tree = LMDBFileTrees()
                guard root != -1 else { return tree }
                var stack = [root]
                while let page = stack.popLast() {
                    let base = page * pageSize
                    guard base >= 0, base + pageSize <= file.count else { throw Damaged(description: "page \(page) past the end of \(path)") }
                    tree.pages.append(page)
                    let flags = try u16(base + 10)
                    if flags & 0x04 != 0 {  // P_OVERFLOW: a run of pages
                        let count = try u32(base + 12)
                        if count > 1 { tree.pages.append(contentsOf: (page + 1)..<(page + count)) }
                        continue
                    }
                    guard flags & 0x03 != 0, flags & 0x20 == 0 else { continue }  // branch or leaf; LEAF2 holds no nodes
                    let lower = try u16(base + 12)
                    let nodes = max(0, (lower - headerSize) / 2)
                    for n in 0..<nodes {
                        let node = base + (try u16(base + headerSize + 2 * n))
                        let lo = try u16(node), hi = try u16(node + 2), nodeFlags = try u16(node + 4), keySize = try u16(node + 6)
                        if flags & 0x01 != 0 {  // P_BRANCH: the child's page number in lo, hi and flags
                            stack.append(lo | hi << 16 | nodeFlags << 32)
                            continue
                        }
                        if n == 0, keySize > 0 { tree.leafFirstByte[page] = file[node + 8] }
                        let value = node + 8 + keySize
                        if nodeFlags & 0x01 != 0 { stack.append(try u64(value)) }  // F_BIGDATA: an overflow page
                        if nodeFlags & 0x02 != 0, named {  // F_SUBDATA: a named database's MDB_db
                            let name = String(decoding: UnsafeRawBufferPointer(rebasing: file[(node + 8)..<value]), as: UTF8.self)
                            subdatabases.append((name, value))
                        }
                    }
                }
                return tree
            }
            var trees = ["(free)": try walk(try root(newest.dbs), named: false), "(main)": try walk(try root(newest.dbs + dbSize), named: true)]
            for sub in subdatabases { trees[sub.name] = try walk(try root(sub.db), named: false) }
            return (trees, pageSize)
        }
    }
}
