import ArgumentParser
import ChorusCrypto
import ChorusNode
import ChorusReplay
import Foundation

@main
struct ChorusReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chorus-replay",
        abstract: "Audit and debug a Chorus store by replaying its log. Never writes to the store it reads.",
        discussion: """
            Exit status: 0 all good; 1 a finding (damage, a fork, a projection that differs \
            from the log, a broken coin invariant); 2 a usage or I/O error.
            """,
        subcommands: [Verify.self, Rebuild.self, Diff.self, History.self, AsOf.self, Audit.self, Stats.self])

    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let exit as ExitCode {
            Foundation.exit(exit.rawValue)
        } catch {
            if exitCode(for: error) == .success { self.exit(withError: error) }
            if error is ValidationError || exitCode(for: error) == .validationFailure {
                printError(fullMessage(for: error))
                printError("Run `chorus-replay --help` (or `chorus-replay COMMAND --help`) for usage.")
            } else {
                printError("error: \(error)")
            }
            Foundation.exit(2)
        }
    }
}

struct StoreOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The store to read (default: $CHORUS_STORE, else ./chorus-data).", valueName: "dir"))
    var store: String?

    var path: String {
        if let store { return store }
        if let env = ProcessInfo.processInfo.environment["CHORUS_STORE"], !env.isEmpty { return env }
        return "./chorus-data"
    }

    func open() throws -> ReplayStore { try ReplayStore.open(path) }
}

struct JSONOption: ParsableArguments {
    @Flag(name: .long, help: "Print machine-readable JSON instead of text.")
    var json = false
}

func printError(_ text: String) { FileHandle.standardError.write(Data((text + "\n").utf8)) }

func printJSON(_ value: JSONValue) { print(value.rendered()) }

/// A one-line progress bar on stderr, only when stderr is a terminal and
/// the work has run for more than a moment.
final class ProgressBar: @unchecked Sendable {
    // Safety: used from the thread running the command only.
    private let enabled = isatty(2) == 1
    private let start = Date()
    private var shown = false
    private var lastDraw = Date.distantPast

    func update(_ stage: String, _ done: Int, _ total: Int) {
        guard enabled, Date().timeIntervalSince(start) > 0.5, Date().timeIntervalSince(lastDraw) > 0.1 else { return }
        lastDraw = Date()
        shown = true
        let width = 30
        let filled = total > 0 ? min(width, done * width / total) : 0
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        FileHandle.standardError.write(Data("\r\(stage) [\(bar)] \(done)/\(total)   ".utf8))
    }

    func finish() {
        if shown { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}

func parseObject(_ text: String) throws -> Bytes32 {
    guard let key = Bytes32(hex: text.lowercased()) else { throw ValidationError("OBJECT must be 64 hex digits, got \"\(text)\"") }
    return key
}

func findingJSON(_ f: Finding) -> JSONValue {
    .object([
        ("code", .string(f.code)), ("message", .string(f.message)), ("event", f.event.map { .string($0.hex) } ?? .null),
        ("location", .string(f.location)),
    ])
}

func printFindings(_ findings: [Finding]) {
    if findings.isEmpty {
        print("no findings")
    } else {
        print("\(findings.count) finding\(findings.count == 1 ? "" : "s"):")
        for f in findings {
            print("  [\(f.code)] \(f.location): \(f.message)\(f.event.map { " (event \($0.hex))" } ?? "")")
        }
    }
}
