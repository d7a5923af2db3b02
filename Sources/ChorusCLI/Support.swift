import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode
import Foundation

/// `--store DIR`, shared by every command that touches a store.
struct StoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The store directory (default: $CHORUS_STORE, else ./chorus-data).", valueName: "dir"))
    var store: String?

    var path: String { storePath(store) }

    func open(readOnly: Bool = false) async throws -> Node {
        var options = NodeOptions()
        // Opening an older store folds its whole log into projections first.
        let bar = ProgressBar()
        options.rebuildProgress = { done, total in bar.update("rebuilding projections", done, total) }
        defer { bar.finish() }
        return try await Node.open(at: path, readOnly: readOnly, options: options)
    }
}

/// An error that has already been explained to the user.
struct CommandFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// Pads columns for human-readable tables. Every cell is made terminal-safe:
/// cells hold names, captions, notes and texts that came from the network.
func table(_ rows: [[String]], header: [String]) -> String {
    let all = [header] + rows.map { $0.map { terminalSafe($0) } }
    let widths = header.indices.map { col in all.map { $0[col].count }.max() ?? 0 }
    return all.map { row in
        row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
        }.joined(separator: "  ")
    }.joined(separator: "\n")
}
