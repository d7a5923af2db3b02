// chorus-bench import: `chorus export` and `chorus import` of a large file,
// with the peak memory of each process, to show both stay bounded.
import ArgumentParser
import ChorusEvents
import ChorusNode
import ChorusParallel
import ChorusCrypto
import Foundation

struct ImportBenchOptions: ParsableArguments {
    @Option(help: "Megabytes of events to export and import.") var megabytes = 500
    @Flag(help: "Print machine-readable JSON.") var json = false
    func validate() throws { if megabytes < 1 { throw ValidationError("--megabytes must be at least 1") } }
}

struct ImportBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Export and import a large store with the chorus CLI; peak RSS of each process.",
        discussion: """
            Writes an export file of about --megabytes (feeds of 100 profile edits with 1 KB values, \
            signed on all cores), then runs `chorus import` (all-or-nothing: two passes) into an empty \
            store and `chorus export` of the result as child processes, and prints each one's time, \
            peak anonymous memory (sampled from /proc) and peak RSS including the store's mapped pages \
            (getrusage). Needs the chorus executable next to chorus-bench.
            """)
    @OptionGroup var options: ImportBenchOptions
    func run() async throws { try await runImportBenchmark(options) }
}

/// Runs a child process to completion with posix_spawn (Foundation's
/// Process reaps its children itself, which would lose their rusage); its
/// wall time, peak RSS in bytes and exit status. Its output goes to the
/// file `stdout`, or to /dev/null.
func measuredChild(
    _ path: String, _ arguments: [String], stdout: String? = nil
) throws -> (seconds: Double, peakRSS: Int, peakAnon: Int, status: Int32) {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if let stdout {
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    }
    let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for p in argv { free(p) } }
    var pid: pid_t = 0
    let start = Bench.clock()
    let spawned = posix_spawn(&pid, path, &actions, nil, argv, environ)
    guard spawned == 0 else { throw ExitCode(2) }
    var status: Int32 = 0
    var usage = rusage()
    // Sampled while it runs: anonymous memory (heap) apart from the pages of
    // the store's memory map, which the kernel counts in RSS but can drop.
    var peakAnon = 0
    while true {
        let r = wait4(pid, &status, WNOHANG, &usage)
        if r == pid { break }
        if r == -1 && errno != EINTR { break }
        if let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("RssAnon:") }),
            let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        {
            peakAnon = max(peakAnon, kb * 1024)
        }
        usleep(20_000)
    }
    let exitStatus = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return (Bench.clock() - start, Int(usage.ru_maxrss) * 1024, peakAnon, exitStatus)
}

func runImportBenchmark(_ options: ImportBenchOptions) async throws {
    let chorus = try siblingExecutable("chorus")
    let dir = temporaryDirectory("import")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    // Many feeds of 100 events each, every author editing its own profile:
    // a realistic spread (no object is touched by more than 100 events).
    let value = String(repeating: "x", count: 990)
    let perAuthor = 100
    let authors = max(1, options.megabytes * 1_000_000 / 1190 / perAuthor)
    let events = authors * perAuthor
    Bench.note("signing \(events) events from \(authors) authors into an export file...")
    let file = dir + "/export.cbor"
    guard FileManager.default.createFile(atPath: file, contents: nil), let out = FileHandle(forWritingAtPath: file) else {
        throw ExitCode(2)
    }
    let now = UInt64(Date().timeIntervalSince1970 * 1000) - 10_000_000
    for batch in stride(from: 0, to: authors, by: 256) {
        let feeds: [[UInt8]] = parallelMap(Array(batch..<min(authors, batch + 256))) { a in
            let key = SigningKey.generate()
            var prev: EventID? = nil
            var bytes: [UInt8] = []
            for seq in 1...perAuthor {
                let e = try! Event.sign(
                    with: key, seq: UInt64(seq), prev: prev, hlc: HLC(physicalMillis: now + UInt64(seq), logical: 0), kind: .profileSet,
                    object: key.publicKey, payload: ProfileSetPayload(field: .bio, value: .text("\(a) \(seq) " + value)).cbor)
                prev = e.id
                bytes += e.encoded()
            }
            return bytes
        }
        for f in feeds { try out.write(contentsOf: f) }
    }
    try out.close()
    let size = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.intValue ?? 0
    _ = try measuredChild(chorus, ["init", "--store", dir + "/target"])
    Bench.note("chorus import...")
    let imported = try measuredChild(chorus, ["import", "--store", dir + "/target", file])
    Bench.note("chorus export...")
    let export = try measuredChild(chorus, ["export", "--store", dir + "/target", dir + "/again.cbor"])
    if imported.status != 0 {
        // Once more with its output shown, to say why.
        let again = Process()
        again.executableURL = URL(fileURLWithPath: chorus)
        again.arguments = ["import", "--store", dir + "/target", file]
        try again.run()
        again.waitUntilExit()
    }
    guard export.status == 0, imported.status == 0 else {
        FileHandle.standardError.write(Data("export exited \(export.status), import \(imported.status)\n".utf8))
        throw ExitCode(1)
    }
    func mb(_ b: Int) -> String { String(format: "%.0f MB", Double(b) / 1_000_000) }
    if options.json {
        print(JSONValue.object([
            ("events", .uint(UInt64(events))), ("file_bytes", .uint(UInt64(size))),
            ("export_seconds", .string(String(format: "%.2f", export.seconds))), ("export_peak_rss", .uint(UInt64(export.peakRSS))),
            ("export_peak_anonymous", .uint(UInt64(export.peakAnon))),
            ("import_seconds", .string(String(format: "%.2f", imported.seconds))), ("import_peak_rss", .uint(UInt64(imported.peakRSS))),
            ("import_peak_anonymous", .uint(UInt64(imported.peakAnon))),
        ]).rendered())
    } else {
        print("\(events) events, export file \(mb(size))")
        print("chorus export: \(String(format: "%.1f", export.seconds)) s, peak anonymous memory \(mb(export.peakAnon)), peak RSS with the store's mapped pages \(mb(export.peakRSS))")
        print("chorus import: \(String(format: "%.1f", imported.seconds)) s, peak anonymous memory \(mb(imported.peakAnon)) (target ≤ 200 MB), peak RSS with the store's mapped pages \(mb(imported.peakRSS))")
        let store = (try? FileManager.default.attributesOfItem(atPath: dir + "/target/data.mdb")[.size] as? NSNumber)?.intValue ?? 0
        print("the imported store's data.mdb: \(mb(store))")
    }
}
