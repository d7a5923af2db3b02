import ArgumentParser
import ChorusReplay
import Foundation

/// The replay tool's figures on a closed store, `verify` end to end (which
/// includes a full rebuild in a scratch store) and `rebuild --out`, each
/// timed as its users run it: the `chorus-replay` executable in a process
/// of its own: the benchmark's process holds the signed workload and has
/// just ingested and rebuilt, which slowed the same work measurably.
enum ReplayBench {
    static func measure(store: String, events: Int) throws -> (
        verifyRate: Double, verifySeconds: Double, copyRate: Double, copySeconds: Double, findings: Bool
    ) {
        let tool = try siblingExecutable("chorus-replay")
        let verify = try measuredChild(tool, ["verify", "--store", store])
        // 0: clean; 1 (`Exit.finding`): it found something; else it failed.
        guard verify.status == 0 || verify.status == 1 else {
            throw ValidationError("chorus-replay verify --store \(store) exited \(verify.status)")
        }
        let scratch = try ScratchDirectory(prefix: "chorus-bench-replay")
        let copy = try measuredChild(tool, ["rebuild", "--store", store, "--out", scratch.path + "/copy"])
        guard copy.status == 0 else {
            throw ValidationError("chorus-replay rebuild --store \(store) --out \(scratch.path)/copy exited \(copy.status)")
        }
        return (Double(events) / verify.seconds, verify.seconds, Double(events) / copy.seconds, copy.seconds, verify.status == 1)
    }
}
