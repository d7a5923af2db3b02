import ArgumentParser
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusOperations
import ChorusProjections
import Foundation
import Synchronization

/// Exit statuses shared by `chorus` and `chorus-replay` (README, "The
/// `chorus` command"): 0 success, 1 the command ran but refused or found
/// something, 2 usage, store or I/O error.
public enum Exit {
    public static let refused: Int32 = 1
    public static let finding: Int32 = 1
    public static let failure: Int32 = 2
}

/// What both command-line tools do around their commands: run the parsed
/// command and map every failure to an exit status with a message that says
/// what was wrong. An `ExitCode` thrown by a command passes through.
public protocol ChorusCommandLineTool: AsyncParsableCommand {}

extension ChorusCommandLineTool {
    public static func runAndExit() async {
        Foundation.exit(await execute(Array(CommandLine.arguments.dropFirst())))
    }

    /// Runs one command line and returns its exit status; everything it
    /// prints goes through `Console`. `forward`, given the parsed command,
    /// may run it elsewhere (a serving process) and return that status
    /// instead; nil runs it here.
    public static func execute(
        _ arguments: [String], forward: ((any ParsableCommand) async throws -> Int32?)? = nil
    ) async -> Int32 {
        await exitStatus {
            let resolved = try negativeNumbersResolved(arguments)
            var command = try CommandTable.parseLeaf(resolved, root: Self.self) ?? parseAsRoot(resolved)
            if let forward, let forwarded = try await forward(command) { return forwarded }
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return 0
        }
    }

    /// Runs the body of a command and returns the exit status it returns,
    /// or the status its error maps to, with a message that says what was
    /// wrong.
    public static func exitStatus(_ body: () async throws -> Int32) async -> Int32 {
        let name = configuration.commandName ?? "chorus"
        do {
            return try await body()
        } catch let exit as ExitCode {
            return exit.rawValue
        } catch NodeError.refused(let why) {
            // The command was understood but the node refused it (misuse).
            printError("refused: \(why) [\(why.code)]")
            return Exit.refused
        } catch {
            if exitCode(for: error) == .success {
                // --help: the text goes to standard output.
                let text = fullMessage(for: error)
                if !text.isEmpty { emit(text) }
                return 0
            }
            // A parse error, or one of ours that a `validate()` threw, which
            // ArgumentParser wraps in a type of its own: printed as it is, it
            // showed that type's fields instead of the message.
            if error is ValidationError || exitCode(for: error) == .validationFailure
                || String(reflecting: type(of: error)).hasPrefix("ArgumentParser.")
            {
                printError(fullMessage(for: error))
                printError("Run `\(name) --help` (or `\(name) COMMAND --help`) for usage.")
            } else {
                // Our errors describe themselves; `fullMessage` would add type names.
                printError("error: \(error)" + (commandLineHint(for: error).map { "; " + $0 } ?? ""))
            }
            return Exit.failure
        }
    }
}

/// What to type about a library error: the library's messages speak of the
/// library, the tools add their commands and flags.
func commandLineHint(for error: any Error) -> String? {
    switch error {
    case NodeError.notInitialized: "run `chorus init` to create one, or pass --store DIR (or set CHORUS_STORE)"
    case NodeError.alreadyInitialized: "pick another directory with --store"
    case NodeError.storeInUse:
        "if `chorus serve` runs on it, this command needs it stopped (init, serve, issuer create, upgrade and compact do; others run through the server)"
    case NodeError.noIssuerKey: "create one with `chorus issuer create`"
    case NodeError.projectionsStale: "any `chorus` command that writes does, or `chorus rebuild`"
    case NodeError.keyFile: "a new device needs a new store: chorus init --store NEW_DIR"
    case LogError.olderFormat(_, _, let path): "run `chorus upgrade --store \(path)`"
    case ProjectionError.corrupt: "run `chorus rebuild`"
    default: nil
    }
}

/// The store directory a command works on: `--store`, else `$CHORUS_STORE`,
/// else `./chorus-data`.
public func storePath(_ explicit: String?) -> String {
    if let explicit { return explicit }
    if let env = Console.storeVariable, !env.isEmpty { return env }
    return "./chorus-data"
}

/// `--json`, on every command that prints data.
public struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print machine-readable JSON instead of text.")
    public var json = false
    public init() {}
}

package func printJSON(_ value: JSONValue) {
    emit(value.rendered())
}

/// Writes text to stderr (progress and warnings stay out of piped output).
/// Error messages may quote stored or received text: escaped like output.
public func printError(_ text: String) {
    Console.writeError(Data((terminalSafe(text, keepingNewlines: true) + "\n").utf8))
}

public var stderrIsTerminal: Bool { Console.errorIsTerminal }

/// Parses a 32-byte key or id given as 64 hex digits; `what` names the
/// argument in the error.
public func parseKey(_ text: String, what: String) throws -> Bytes32 {
    guard let key = Bytes32(hex: text.lowercased()) else {
        throw ValidationError("\(what) must be 64 hex digits, got \"\(text)\"")
    }
    return key
}

/// Parses a typed id (a user, device, picture, chat or message) given as 64
/// hex digits; `what` names the argument in the error.
public func parseID<ID: TypedID>(_ text: String, what: String, as: ID.Type = ID.self) throws -> ID {
    ID(try parseKey(text, what: what))
}

/// A one-line progress bar on stderr, drawn only when stderr is a terminal
/// and the work has run for more than a moment. Safe to update from any
/// thread (a rebuild reports from the writer's).
public final class ProgressBar: Sendable {
    private struct State {
        var shown = false
        var lastDraw = Date.distantPast
    }
    private let enabled = stderrIsTerminal
    // Captured here: a rebuild reports from the writer's thread, outside the command's task.
    private let streams = Console.streams
    private let start = Date()
    private let state = Mutex(State())

    public init() {}

    public func update(_ stage: String, _ done: Int, _ total: Int) {
        guard enabled, Date().timeIntervalSince(start) > 0.5 else { return }
        let draw = state.withLock { s -> Bool in
            guard Date().timeIntervalSince(s.lastDraw) > 0.1 else { return false }
            s.lastDraw = Date()
            s.shown = true
            return true
        }
        guard draw else { return }
        let width = 30
        let filled = total > 0 ? min(width, done * width / total) : 0
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        write("\r\(stage) [\(bar)] \(done)/\(total)   ")
    }

    /// Clears the bar's line, if one was drawn (and not cleared since).
    public func finish() {
        let shown = state.withLock { s -> Bool in
            defer { s.shown = false }
            return s.shown
        }
        if shown { write("\r\u{1B}[K") }
    }

    private func write(_ text: String) {
        if let streams { streams.writeError(Data(text.utf8)) } else { FileHandle.standardError.write(Data(text.utf8)) }
    }
}

/// Flags of both tools: options that take no value.
let valuelessOptions: Set<String> = [
    "--json", "--admin", "--clear", "--decrypt", "--empty", "--first", "--last", "--live", "--partial", "--help", "--version",
]

/// ArgumentParser reads `-5` as an option. After an option that takes a
/// value, a negative number is that option's value (`--text -5` becomes
/// `--text=-5`); anywhere else it is refused with a message that says what
/// to do, instead of "Missing expected argument". Nothing after `--` changes.
func negativeNumbersResolved(_ arguments: [String]) throws -> [String] {
    func isNegativeNumber(_ s: String) -> Bool {
        s.count > 1 && s.first == "-" && s.dropFirst().allSatisfy { $0.isNumber || $0 == "." }
    }
    var out: [String] = []
    var rest = false
    for argument in arguments {
        if rest || argument == "--" {
            rest = true
            out.append(argument)
            continue
        }
        guard isNegativeNumber(argument) else {
            out.append(argument)
            continue
        }
        if let previous = out.last, previous.hasPrefix("--"), !previous.contains("="), !valuelessOptions.contains(previous) {
            out[out.count - 1] = previous + "=" + argument
            continue
        }
        throw ValidationError(
            "\(argument) is a negative number: amounts, slots, counts and limits are 0 or more. To pass text that starts with '-', write --text=\(argument) or put it after --.")
    }
    return out
}

/// Parses a command line by its leaf command alone when the words before
/// the options name one (`follow USER`, `query profile --json`): building
/// ArgumentParser's tree of every command on each parse cost about half a
/// millisecond, which a server running its clients' command lines pays per
/// request. Anything else (help, a mistake, a group without its subcommand)
/// returns nil and goes through the root, so messages and usage stay
/// exactly the root's.
enum CommandTable {
    private static let leaves = Mutex<[ObjectIdentifier: [[String]: any ParsableCommand.Type]]>([:])

    static func parseLeaf(_ arguments: [String], root: any ParsableCommand.Type) -> (any ParsableCommand)? {
        guard !arguments.contains(where: { $0 == "-h" || $0 == "--help" || $0 == "help" || $0 == "--version" }) else { return nil }
        let table = leaves.withLock { cache in
            if let known = cache[ObjectIdentifier(root)] { return known }
            var found: [[String]: any ParsableCommand.Type] = [:]
            collect(root, path: [], into: &found)
            cache[ObjectIdentifier(root)] = found
            return found
        }
        // The longest run of leading words that names a leaf.
        var path: [String] = []
        var leaf: (any ParsableCommand.Type, Int)? = nil
        for word in arguments.prefix(3) {
            path.append(word)
            if let type = table[path] { leaf = (type, path.count) }
        }
        guard let (type, used) = leaf else { return nil }
        return try? type.parseAsRoot(Array(arguments.dropFirst(used)))
    }

    private static func collect(_ type: any ParsableCommand.Type, path: [String], into table: inout [[String]: any ParsableCommand.Type]) {
        let configuration = type.configuration
        if configuration.subcommands.isEmpty {
            if !path.isEmpty { table[path] = type }
            return
        }
        for sub in configuration.subcommands {
            let names = [sub.configuration.commandName ?? sub._commandName] + sub.configuration.aliases
            for name in names { collect(sub, path: path + [name], into: &table) }
        }
    }
}
