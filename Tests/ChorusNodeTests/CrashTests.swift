import ChorusCrypto
import ChorusNode
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// Reads a child's stdout lines on a thread of its own, so the test can wait
/// for a number of lines with a bound instead of blocking forever.
final class LineCollector: Sendable {
    private let lines = Mutex<[String]>([])
    private let ended = Atomic<Bool>(false)

    init(_ handle: FileHandle) {
        let thread = Thread { [self] in
            var buffer = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                    buffer.removeSubrange(buffer.startIndex...newline)
                    lines.withLock { $0.append(line) }
                }
            }
            ended.store(true, ordering: .sequentiallyConsistent)
        }
        thread.start()
    }

    var snapshot: [String] { lines.withLock { $0 } }
    var hasEnded: Bool { ended.load(ordering: .sequentiallyConsistent) }

    /// Waits until `count` lines arrived or the stream ended; fails after `timeout` seconds.
    func wait(forLines count: Int, timeout: Double = 120) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while snapshot.count < count && !hasEnded {
            if Date() > deadline { throw TestFailure("timed out waiting for \(count) lines; got \(snapshot.count)") }
            usleep(2000)
        }
    }
}

@Suite("Crash safety", .closingNodes)
struct CrashTests {
    /// A child appends from 8 concurrent tasks and is killed with SIGKILL
    /// after a random number of acknowledgements (seeded, so a failure
    /// replays). After every kill the store must open, hold every
    /// acknowledged event, and verify end to end.
    @Test func killedWritersLoseNothingAcknowledged() async throws {
        let writer = try productPath("ChorusCrashWriter")
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let store = tmp.store("crash")
        let seed = UInt64(ProcessInfo.processInfo.environment["CHORUS_CRASH_SEED"] ?? "") ?? 20261122
        var rng = SplitMix64(seed: seed)
        var acknowledged: [String: UInt64] = [:]
        let rounds = 15
        for round in 0..<rounds {
            let killAfter = Int.random(in: 1...400, using: &rng)
            // On a thread of its own: waiting for the child here would hold a
            // cooperative thread for the whole test, stalling other tests.
            let (output, killed) = try await offThePool { try Self.runAndKill(writer: writer, store: store, afterLines: 1 + killAfter) }
            #expect(killed, "round \(round) (seed \(seed)): child exited by itself")
            for line in output where line.hasPrefix("ack ") {
                let parts = line.split(separator: " ")
                acknowledged[String(parts[2])] = UInt64(parts[1])
            }

            let node = opened(try await Node.open(at: store, readOnly: true))
            let missing = acknowledged.keys.filter { (try? node.event(Bytes32(hex: $0)!)) == nil }
            let problems = try node.log.integrityProblems()
            let count = try node.feed(node.identity.device.raw).count
            #expect(problems == [], "round \(round) (seed \(seed))")
            #expect(missing == [], "round \(round) (seed \(seed)): acknowledged events lost")
            #expect(count >= acknowledged.count)
            await node.close()  // the next round's child writes the store
        }
        #expect(acknowledged.count >= rounds)
    }

    /// Runs the crash writer, kills it with SIGKILL once `afterLines` lines
    /// arrived, and returns every line it wrote and whether the kill ended it.
    static func runAndKill(writer: String, store: String, afterLines: Int) throws -> (lines: [String], killed: Bool) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: writer)
        process.arguments = [store, "8"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let lines = LineCollector(out.fileHandleForReading)
        try lines.wait(forLines: afterLines)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try lines.wait(forLines: Int.max, timeout: 30)  // drain what was written before the kill
        return (lines.snapshot, process.terminationReason == .uncaughtSignal)
    }
}

