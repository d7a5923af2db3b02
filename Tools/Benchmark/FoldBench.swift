// chorus-bench fold: the fold's cost against the size of the window it
// folds at once, on a real store's log.
import ArgumentParser
import ChorusLog
import ChorusNode
import ChorusProjections
import ChorusReplay
import ChorusStorage
import ChorusStore
import Foundation

struct FoldBenchOptions: ParsableArguments {
    @Option(help: "The store whose log is folded again (a store `chorus-bench projections --keep` left, for one).")
    var store: String
    @Option(
        parsing: .upToNextOption,
        help: "Events folded in one transaction; each size is one run over the whole log (0: the whole log at once).")
    var window: [Int] = [25_000, 100_000, 250_000, 0]
    @Option(help: "Events appended per log transaction before each window is folded.") var appendBatch = 30_000
    @Flag(help: "Print machine-readable JSON.") var json = false
    func validate() throws {
        if window.contains(where: { $0 < 0 }) { throw ValidationError("--window sizes must be 0 (the whole log) or positive") }
        if appendBatch < 1 { throw ValidationError("--append-batch must be at least 1") }
    }
}

struct FoldBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fold",
        abstract: "The fold's CPU per event against the window of events folded at once.",
        discussion: """
            Reads the log of an existing store in arrival order and, for each window size, builds a \
            fresh store beside it: each window's events are appended to the log (without folding, in \
            transactions of --append-batch events), then folded in one write transaction \
            (Projections.apply), as a projection stage behind the log would fold them; \
            the window's last slice is appended in the fold's transaction. Reports the \
            writing thread's CPU time and the bytes it handed to pwrite (Linux) for the appends and \
            for the folds, and checks that each run's \
            projection digest equals the source store's (exit status 1 if not). The log stays as far \
            as the projections: the fold reads the log, so a window is appended just before it is folded.
            """)
    @OptionGroup var options: FoldBenchOptions
    func run() async throws { try runFoldBenchmark(options) }
}

func runFoldBenchmark(_ options: FoldBenchOptions) throws {
    let source = try ReplayStore.open(options.store)
    let total = try source.log.eventCount()
    let expected = try source.projections.digest()
    let nowMillis = UInt64(Date().timeIntervalSince1970 * 1000)
    struct Row {
        var window: Int, windows = 0, appendCPU = 0.0, foldCPU = 0.0, seconds = 0.0, digestMatches = false
        /// Bytes the thread handed to `write`/`pwrite` (the commits' pages), nil where /proc does not tell.
        var appendBytes: Int? = 0, foldBytes: Int? = 0
    }
    /// Nil once either side is unknown.
    func sum(_ a: Int?, _ b: Int?) -> Int? { if let a, let b { a + b } else { nil } }
    var rows: [Row] = []
    for window in options.window {
        let size = window == 0 ? total : window
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("chorus-fold-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let store = try Store(env: try Environment(path: scratch, initialMapSize: 1 << 30), config: source.projections.config)
        var row = Row(window: size)
        var since: UInt64 = 0
        Bench.note("folding \(total) events in windows of \(size)...")
        let started = Bench.clock()
        while true {
            // Read and decoded before the clock of either stage runs: that
            // part is the same whatever the window.
            let events = try source.log.arrivals(since: since, limit: size, trusted: true)
            guard let last = events.last else { break }
            since = last.arrival
            // Appended slice by slice; the last slice in the fold's own
            // transaction, as the node's commits append and fold together.
            // A transaction's body may run again (when the map grows), so
            // each one starts from what the commits before it stored.
            var stored: [StoredEvent] = []
            stored.reserveCapacity(events.count)
            let slices = stride(from: 0, to: events.count, by: options.appendBatch).map { $0..<min(events.count, $0 + options.appendBatch) }
            for (n, slice) in slices.enumerated() {
                let folds = n == slices.count - 1
                let sliceStarted = threadCPUSeconds()
                let writtenBefore = currentThreadBytesWritten()
                let (appended, foldStarted) = try store.commit(nowMillis: nowMillis, driftMillis: 60_000, fold: false) { batch in
                    var appended: [StoredEvent] = []
                    for e in events[slice] {
                        switch try batch.append(e.event) {
                        case .accepted(let arrival): appended.append(StoredEvent(event: e.event, arrival: arrival))
                        case let other: throw ValidationError("arrival \(e.arrival) of the source was not accepted again: \(other)")
                        }
                    }
                    guard folds else { return (appended, Double?.none) }
                    // The fold finds events by id: as `Store.commit` does before it folds.
                    try batch.writeIDIndex()
                    let window = stored + appended
                    let foldStarted = threadCPUSeconds()
                    let txn = batch.transaction
                    try store.carryOut(try store.projections.apply(window, in: txn), in: txn)
                    return (appended, foldStarted)
                }
                stored += appended
                // The commit's page writes and flush count with the fold when it folded.
                let committed = threadCPUSeconds()
                let written: Int? = if let before = writtenBefore, let after = currentThreadBytesWritten() { after - before } else { nil }
                if folds { row.foldBytes = sum(row.foldBytes, written) } else { row.appendBytes = sum(row.appendBytes, written) }
                if let foldStarted {
                    row.appendCPU += foldStarted - sliceStarted
                    row.foldCPU += committed - foldStarted
                } else {
                    row.appendCPU += committed - sliceStarted
                }
            }
            row.windows += 1
        }
        row.seconds = Bench.clock() - started
        row.digestMatches = try store.projections.digest() == expected
        rows.append(row)
    }
    let failed = rows.contains { !$0.digestMatches }
    if options.json {
        let runs: [JSONValue] = rows.map { r in
            let perEvent = r.foldCPU * 1e6 / Double(max(1, total))
            return JSONValue.object([
                ("window", .uint(UInt64(r.window))), ("windows", .uint(UInt64(r.windows))),
                ("append_cpu_seconds", .string(String(format: "%.2f", r.appendCPU))),
                ("fold_cpu_seconds", .string(String(format: "%.2f", r.foldCPU))),
                ("fold_cpu_us_per_event", .string(String(format: "%.2f", perEvent))),
                ("append_bytes_written", r.appendBytes.map { .uint(UInt64($0)) } ?? .null),
                ("fold_bytes_written", r.foldBytes.map { .uint(UInt64($0)) } ?? .null),
                ("seconds", .string(String(format: "%.2f", r.seconds))), ("digest_matches", .bool(r.digestMatches)),
            ])
        }
        print(JSONValue.object([("events", .uint(UInt64(total))), ("runs", .array(runs))]).rendered())
    } else {
        print("chorus-bench fold: \(total) events of \(options.store), appended in transactions of \(options.appendBatch)")
        print("window     windows  append CPU  fold CPU  fold CPU/event  append written  fold written  wall      digest")
        func perEvent(_ bytes: Int?) -> String {
            bytes.map { String(format: "%.1f KB/event", Double($0) / 1000 / Double(max(1, total))) } ?? "n/a"
        }
        for r in rows {
            print(String(
                format: "%-10d %-8d %8.2f s  %6.2f s  %9.2f µs   %-14@  %-12@  %6.1f s  %@", r.window, r.windows, r.appendCPU, r.foldCPU,
                r.foldCPU * 1e6 / Double(max(1, total)), perEvent(r.appendBytes), perEvent(r.foldBytes), r.seconds,
                r.digestMatches ? "equal" : "DIFFERS"))
        }
    }
    if failed { throw ExitCode(1) }
}
