#if Service
import ChorusTestSupport
import Foundation
import Testing

@Suite("the demo with a server on every node")
struct DemoServedTests {
    /// The demo's output with what differs between any two runs made
    /// comparable: the temporary directory, ports, durations, ids and times
    /// (as tokens in order of appearance), wire byte counts, and the order of
    /// lists sorted by random keys.
    static func comparable(_ output: String) -> [String] {
        var normalize = Normalizer()
        let lines: [String] = output.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            var s = String(line)
            for (pattern, replacement) in [
                (#"/tmp/chorus-demo\.[A-Za-z0-9]+"#, "<dir>"), (#"127\.0\.0\.1:[0-9]+"#, "<addr>"), (#"[0-9]+\.[0-9]+ s\b"#, "<secs>"),
                (#"chorus-network1:[A-Za-z0-9_-]+"#, "<invite>"), (#"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]+Z"#, "<time>"),
                (#"wire: .*"#, "wire: <bytes>"),
            ] {
                s = s.replacingOccurrences(of: pattern, with: replacement, options: .regularExpression)
            }
            s = normalize(s)
            // Lists in key order: the keys are random, so is their order.
            if s.hasPrefix("members: ") {
                s = "members: " + s.dropFirst(9).components(separatedBy: ", ").map { $0.replacingOccurrences(of: #"<[0-9]+>"#, with: "<key>", options: .regularExpression) }.sorted().joined(separator: ", ")
            }
            if let arrow = s.range(of: " -> ") {
                s = String(s[..<arrow.upperBound]) + s[arrow.upperBound...].components(separatedBy: ", ").map { $0.replacingOccurrences(of: #"<[0-9]+>"#, with: "<key>", options: .regularExpression) }.sorted().joined(separator: ", ")
            }
            return s
        }
        // Runs of per-device lines are in key order too: compared as sorted runs.
        var out: [String] = []
        var run: [String] = []
        for line in lines + [""] {
            if line.hasPrefix("      device ") {
                run.append(line.replacingOccurrences(of: #"<[0-9]+>"#, with: "<key>", options: .regularExpression))
                continue
            }
            out += run.sorted()
            run = []
            out.append(line)
        }
        return out
    }

    @Test("every command of the demo gives the same output when each node runs `chorus serve`")
    func demoServedEqualsDirect() async throws {
        let chorus = try productPath("chorus")
        let demo = repositoryRoot.appendingPathComponent("Tools/demo.sh").path
        let direct = try await runCommand(demo, [chorus], environment: ["CHORUS_DEMO_SERVED": "0"])
        #expect(direct.status == 0, "\(direct.stdout.suffix(2000))\(direct.stderr)")
        let served = try await runCommand(demo, [chorus], environment: ["CHORUS_DEMO_SERVED": "1"])
        #expect(served.status == 0, "\(served.stdout.suffix(2000))\(served.stderr)")
        let (a, b) = (Self.comparable(direct.stdout), Self.comparable(served.stdout))
        #expect(a.count == b.count)
        for (i, (x, y)) in zip(a, b).enumerated() where x != y {
            Issue.record("line \(i + 1) differs:\n  direct: \(x)\n  served: \(y)")
        }
        #expect(served.stdout.contains("Demo complete."))
    }
}
#endif
