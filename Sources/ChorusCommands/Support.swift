import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusStorage
import Foundation

/// `--store DIR`, shared by every command that touches a store.
struct StoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The store directory (default: $CHORUS_STORE, else ./chorus-data).", valueName: "dir"))
    var store: String?

    var path: String { storePath(store) }

    /// How long a command waits for another process that writes the store:
    /// `$CHORUS_WRITER_WAIT` seconds, 60 by default (README "Several writers").
    static var writerLockWait: Duration {
        let text = ProcessInfo.processInfo.environment["CHORUS_WRITER_WAIT"] ?? ""
        return .seconds(Int(text).map { max(0, $0) } ?? 60)
    }

    /// The node a command works on: the serving process's own when it runs
    /// the command for a client (Specs/api.md §4), else the store opened now.
    func open(readOnly: Bool = false, onRebuild: (@Sendable (_ why: Staleness, _ events: Int) -> Void)? = nil) async throws -> Node {
        if let served = ServedStore.node { return served }
        var options = NodeOptions()
        options.onRebuild = onRebuild
        // Opening an older store folds its whole log into projections first.
        let bar = ProgressBar()
        options.rebuildProgress = { done, total in bar.update("rebuilding projections", done, total) }
        // Another command writing the same store finishes in moments: queue behind it.
        let wait = Self.writerLockWait
        options.writerLockWait = wait
        let path = self.path
        options.onWaitingForWriterLock = {
            printError("chorus: waiting for another process writing to \(path) (up to \(wait.components.seconds) s; CHORUS_WRITER_WAIT sets it)")
        }
        defer { bar.finish() }
        return try await Node.open(at: path, readOnly: readOnly, options: options)
    }
}

/// Closes a node `open` returned, unless it is the serving process's, which stays open.
func release(_ node: Node) async {
    if node !== ServedStore.node { await node.close() }
}

/// The node of the `chorus serve` process, while it runs a command for a client.
enum ServedStore {
    @TaskLocal static var node: Node?
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

/// This process's standard input copied to an owner-only temporary file (read
/// in slices, never held in memory); returns its path. The caller removes it.
func spoolStandardInput(prefix: String) throws -> String {
    let path = NSTemporaryDirectory() + prefix + UUID().uuidString
    let out: FileHandle
    do { out = try OwnerOnlyFile.create(path) } catch {
        throw CommandFailure(message: "cannot create a temporary file for standard input: \(error)")
    }
    defer { try? out.close() }
    while let chunk = try FileHandle.standardInput.read(upToCount: 1 << 20), !chunk.isEmpty { try out.write(contentsOf: chunk) }
    return path
}
