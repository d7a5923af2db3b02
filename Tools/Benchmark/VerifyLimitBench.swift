import ArgumentParser
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusParallel
import Foundation

/// Why the verify limit verifies distinct signatures (`VerifySet`): the
/// rate of one signature a thread verified over and over against the rate
/// over distinct events, measured in alternating pairs so the machine's
/// drift affects both alike.
struct VerifyLimitBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-limit",
        abstract: "The verify limit over distinct signatures against one signature repeated, in alternating pairs.",
        discussion: """
            Signs a workload's events, then measures, on one core and on all cores, pairs of \
            (one signature a thread verified over and over, the workload's distinct signatures \
            in turn), each pair in the other order than the one before, and prints each pair's \
            ratio, sorted, and the means.
            """)

    @Option(help: "Pairs of measurements for each thread count.") var pairs = 15
    @Option(help: "Seconds per measurement.") var seconds = 0.3
    @Option(help: "Events of the workload to sign.") var events = 50_000
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if pairs < 1 { throw ValidationError("--pairs must be at least 1") }
        if seconds <= 0 { throw ValidationError("--seconds must be positive") }
        if events < 1_000 { throw ValidationError("--events must be at least 1000") }
    }

    func run() async throws {
        Bench.note("signing \(events) events...")
        let startMillis = UInt64(Date().timeIntervalSince1970 * 1000) - UInt64(events) * 31 - 3_600_000
        let workload = Workload.generate(events: events, users: min(1_500, max(20, events / 650)), seed: 1, startMillis: startMillis)
        let jobs: [(key: SigningKey, event: UnsignedEvent)] = workload.feeds.flatMap { f in f.events.map { (f.key, $0) } }
        let envelopes = parallelMap(jobs, chunk: 256) { $0.event.signed(with: $0.key).encoded() }
        let set = try VerifySet(envelopes: envelopes)
        let cores = ProcessInfo.processInfo.activeProcessorCount
        var results: [JSONValue] = []
        for threads in Array(Set([1, cores])).sorted() {
            Bench.note("\(pairs) pairs on \(threads) thread(s)...")
            var repeated: [Double] = []
            var distinct: [Double] = []
            // Each pair in the other order than the one before, so that a
            // drift within a pair favours neither.
            for pair in 0..<pairs {
                if pair % 2 == 0 {
                    repeated.append(set.repeatedPerSecond(threads: threads, seconds: seconds))
                    distinct.append(set.perSecond(threads: threads, seconds: seconds))
                } else {
                    distinct.append(set.perSecond(threads: threads, seconds: seconds))
                    repeated.append(set.repeatedPerSecond(threads: threads, seconds: seconds))
                }
            }
            let ratios = zip(repeated, distinct).map { $0 / $1 }.sorted()
            let mean = { (v: [Double]) in v.reduce(0, +) / Double(v.count) }
            if json {
                results.append(.object([
                    ("threads", .uint(UInt64(threads))),
                    ("repeated_per_second", .uint(UInt64(mean(repeated)))),
                    ("distinct_per_second", .uint(UInt64(mean(distinct)))),
                    ("ratios_sorted", .array(ratios.map { .string(String(format: "%.3f", $0)) })),
                ]))
            } else {
                print("\(threads) thread(s): one signature repeated \(Int(mean(repeated)))/s, distinct signatures \(Int(mean(distinct)))/s")
                print("  repeated / distinct, each pair, sorted: " + ratios.map { String(format: "%.3f", $0) }.joined(separator: " "))
            }
        }
        if json { print(JSONValue.object([("cores", .uint(UInt64(cores))), ("results", .array(results))]).rendered()) }
    }
}
