import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// A fresh directory under the system temp dir, removed by `cleanup`.
struct TempDir {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "chorus-test-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func store(_ name: String) -> String { path + "/" + name }
    func cleanup() { try? FileManager.default.removeItem(atPath: path) }
}

/// A wall clock the test sets by hand.
final class ManualClock: Sendable {
    private let millis: Atomic<UInt64>
    init(_ start: UInt64) { millis = Atomic(start) }
    func set(_ value: UInt64) { millis.store(value, ordering: .sequentiallyConsistent) }
    var now: UInt64 { millis.load(ordering: .sequentiallyConsistent) }
}

func options(clock: ManualClock? = nil, mapSize: Int? = nil) -> NodeOptions {
    var o = NodeOptions()
    if let clock { o.clock = { clock.now } }
    if let mapSize { o.initialMapSize = mapSize }
    return o
}

/// Signs events of one feed without a node, for building ingest batches.
struct FeedWriter {
    let key: SigningKey
    var head: (seq: UInt64, id: EventID, hlc: HLC)? = nil
    var millis: UInt64

    init(seedByte: UInt8, startMillis: UInt64 = 1_700_000_000_000) {
        key = SigningKey(seed: [UInt8](repeating: seedByte, count: 32))!
        millis = startMillis
    }

    mutating func next(_ text: String = "hello") -> Event {
        millis += 1
        let e = try! Event.sign(
            with: key, seq: (head?.seq ?? 0) + 1, prev: head?.id, hlc: HLC(physicalMillis: millis, logical: 0),
            kind: .profileSet, object: key.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text(text))]))
        head = (e.seq, e.id, e.hlc)
        return e
    }
}

/// Where SwiftPM put the executables built with the tests.
func productPath(_ name: String) throws -> String {
    let argv0 = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var dir = argv0.deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    let fallback = repositoryRoot.appendingPathComponent(".build/debug/\(name)").path
    guard FileManager.default.isExecutableFile(atPath: fallback) else {
        throw TestFailure("cannot find the \(name) executable next to \(argv0.path)")
    }
    return fallback
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

struct CommandResult {
    let status: Int32
    let stdout: String
    let stderr: String
}

/// Runs a command to completion (no input), capturing its output.
func runCommand(_ path: String, _ arguments: [String], environment: [String: String] = [:]) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env["CHORUS_STORE"] = nil
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    // Read both pipes to the end before waiting, so a full pipe cannot block the child.
    let errData = Mutex(Data())
    let errReader = Thread { errData.withLock { $0 = err.fileHandleForReading.readDataToEndOfFile() } }
    errReader.start()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    while errReader.isExecuting || !errReader.isFinished { usleep(1000) }
    return CommandResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: errData.withLock { String(decoding: $0, as: UTF8.self) })
}
