import ArgumentParser
import ChorusCrypto
import ChorusEvents
import ChorusNode
import Foundation

/// `--store DIR`, shared by every command that touches a store.
struct StoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The store directory (default: $CHORUS_STORE, else ./chorus-data).", valueName: "dir"))
    var store: String?

    var path: String {
        if let store { return store }
        if let env = ProcessInfo.processInfo.environment["CHORUS_STORE"], !env.isEmpty { return env }
        return "./chorus-data"
    }

    func open(readOnly: Bool = false) async throws -> Node {
        var options = NodeOptions()
        if stderrIsTerminal {
            // Opening an older store folds its whole log into projections first.
            options.rebuildProgress = { done, total in
                FileHandle.standardError.write(Data("\rrebuilding projections: \(done) of \(total) events".utf8))
                if done >= total { FileHandle.standardError.write(Data("\n".utf8)) }
            }
        }
        return try await Node.open(at: path, readOnly: readOnly, options: options)
    }
}

struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print machine-readable JSON instead of text.")
    var json = false
}

/// Exit statuses (README "Exit codes"): 0 success, 1 the command ran but
/// refused or found something, 2 usage, store or I/O error.
enum Exit {
    static let refused: Int32 = 1
    static let failure: Int32 = 2
}

/// An error that has already been explained to the user.
struct CommandFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

func printJSON(_ value: JSONValue) {
    print(value.rendered())
}

func parseKey(_ text: String, what: String) throws -> Bytes32 {
    guard let key = Bytes32(hex: text.lowercased()) else {
        throw ValidationError("\(what) must be 64 hex digits, got \"\(text)\"")
    }
    return key
}

/// Writes text to stderr (progress and warnings stay out of piped output).
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

var stderrIsTerminal: Bool { isatty(2) == 1 }

/// Pads columns for human-readable tables.
func table(_ rows: [[String]], header: [String]) -> String {
    let all = [header] + rows
    let widths = header.indices.map { col in all.map { $0[col].count }.max() ?? 0 }
    return all.map { row in
        row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
        }.joined(separator: "  ")
    }.joined(separator: "\n")
}
