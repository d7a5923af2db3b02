import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusProjections
import ChorusStorage
import Dispatch
import Foundation
import Synchronization

/// `--store DIR`, shared by every command that touches a store.
struct StoreOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The store directory (default: $CHORUS_STORE, else ./chorus-data).", valueName: "dir"))
    var store: String?

    var path: String { storePath(store) }

    /// How long a command waits for another process that writes the store:
    /// `$CHORUS_WRITER_WAIT` seconds, 60 by default (README "A running node").
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

/// This process's standard input, an event file (Specs/events.md §8),
/// copied to an owner-only temporary file (read in slices, never held in
/// memory); returns its path. The caller removes it; an interrupt or
/// termination meanwhile removes it too (`TemporaryFiles`). Input that does
/// not start as an event file is refused at its first byte, and the copy
/// stops before it would leave the temporary directory's disk with less
/// than `spoolReserve` free: an endless or huge stream cannot fill the disk.
func spoolStandardInput(prefix: String) throws -> String {
    let directory = NSTemporaryDirectory()
    let path = directory + prefix + UUID().uuidString
    let out: FileHandle
    TemporaryFiles.catchSignals()
    do { out = try OwnerOnlyFile.create(path) } catch {
        throw CommandFailure(message: "cannot create a temporary file for standard input: \(error)")
    }
    TemporaryFiles.register(path)
    var keep = false
    defer {
        try? out.close()
        if !keep {
            try? FileManager.default.removeItem(atPath: path)
            TemporaryFiles.unregister(path)
        }
    }
    let limit = spoolLimit(directory)
    var written = 0
    var started = false
    while let chunk = try FileHandle.standardInput.read(upToCount: 1 << 20), !chunk.isEmpty {
        if !started, let first = chunk.first(where: { !EventFile.isBlank($0) }) {
            // JSON lines start with `{`; a CBOR sequence of envelopes with an array of three (0x83).
            guard first == UInt8(ascii: "{") || first == 0x83 else {
                throw CommandFailure(
                    message: "standard input is not a Chorus event file (a CBOR sequence or JSON lines written by `chorus export`): its first byte is 0x\(String(first, radix: 16))")
            }
            started = true
        }
        written += chunk.count
        guard written <= limit else {
            throw CommandFailure(
                message: "standard input passed \(written >> 20) MiB, as much as the temporary directory \(directory) can hold while keeping \(spoolReserve >> 20) MiB free; write it to a file and import the file")
        }
        try out.write(contentsOf: chunk)
    }
    keep = true
    return path
}

/// Free space a spool of standard input always leaves on its disk.
let spoolReserve = 256 << 20

/// The most bytes a spool in `directory` may take: its disk's free space less `spoolReserve`.
func spoolLimit(_ directory: String) -> Int {
    var info = statvfs()
    guard statvfs(directory, &info) == 0 else { return 1 << 30 }
    let free = Int(info.f_bavail) * Int(info.f_frsize)
    return max(0, free - spoolReserve)
}

/// Temporary files a command removes even when SIGINT, SIGTERM or SIGHUP
/// ends it: the signal is caught, the files are removed, and the process
/// exits with 128 + the signal's number, as a shell reports a process the
/// signal ended. Not in a serving process, whose signals are the server's.
enum TemporaryFiles {
    private static let paths = Mutex<Set<String>>([])
    private static let sources = Mutex<[any DispatchSourceSignal]>([])

    /// Catches the signals from now on: call it before creating a file to
    /// register (a signal before this ends the process with its default
    /// action, when there is nothing to remove yet).
    static func catchSignals() {
        guard Console.streams == nil else { return }
        sources.withLock { sources in
            guard sources.isEmpty else { return }
            sources = SignalSources.catching([SIGINT, SIGTERM, SIGHUP]) { sig in
                for path in TemporaryFiles.paths.withLock({ $0 }) { unlink(path) }
                // The shell's status for a process a signal ended.
                _exit(128 + sig)
            }
        }
    }

    static func register(_ path: String) {
        catchSignals()
        paths.withLock { _ = $0.insert(path) }
    }

    static func unregister(_ path: String) { paths.withLock { _ = $0.remove(path) } }
}

/// Dispatch signal sources, returned once libdispatch has registered them.
/// On Linux, libdispatch installs its own handler for a signal when it
/// registers the source (later, on its manager thread): `SIG_IGN` set
/// before that would drop a signal arriving in between, and `SIG_IGN` set
/// after it would replace that handler for good. So the signal keeps its
/// default action (ending the process) until the source is registered, and
/// this waits for that.
enum SignalSources {
    static func catching(_ signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) -> [any DispatchSourceSignal] {
        let registered = DispatchSemaphore(value: 0)
        let sources = signals.map { sig -> any DispatchSourceSignal in
            #if canImport(Darwin)
            signal(sig, SIG_IGN)  // kqueue reports signals whatever their action: the default must not end the process
            #endif
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { handler(sig) }
            source.setRegistrationHandler { registered.signal() }
            source.resume()
            return source
        }
        // Bounded: a machine too busy to register in time keeps the default actions a moment longer.
        for _ in sources { _ = registered.wait(timeout: .now() + .seconds(10)) }
        return sources
    }
}
