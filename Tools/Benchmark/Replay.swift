import ChorusReplay
import Foundation

/// The replay tool's figures on a closed store: `verify` end to end (which
/// includes a full rebuild in a scratch store) and `rebuild --out`.
enum ReplayBench {
    static func measure(store: String, events: Int) throws -> (
        verifyRate: Double, verifySeconds: Double, copyRate: Double, copySeconds: Double, findings: Int
    ) {
        let replay = try ReplayStore.open(store)
        var t0 = Bench.clock()
        let report = try replay.verify()
        let verifySeconds = Bench.clock() - t0
        let scratch = try ScratchDirectory(prefix: "chorus-bench-replay")
        t0 = Bench.clock()
        _ = try replay.copy(to: scratch.path + "/copy")
        let copySeconds = Bench.clock() - t0
        return (Double(events) / verifySeconds, verifySeconds, Double(events) / copySeconds, copySeconds, report.findings.count)
    }
}
