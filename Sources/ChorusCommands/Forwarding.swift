import ArgumentParser
import ChorusCommandLine
import ChorusNode
import ChorusService
import Foundation

/// Commands that need the store to themselves: they never run inside a
/// serving process (Specs/api.md §4.3).
protocol NeedsStoreToItself {}
extension Serve: NeedsStoreToItself {}
extension Init: NeedsStoreToItself {}
extension IssuerCreate: NeedsStoreToItself {}
extension Upgrade: NeedsStoreToItself {}
extension Compact: NeedsStoreToItself {}

/// Commands that may read standard input.
protocol ReadsStandardInput {
    var readsStandardInput: Bool { get }
}

extension Import: ReadsStandardInput {
    var readsStandardInput: Bool { file == "-" }
}

/// While `chorus serve` runs on a store it owns the store; other `chorus`
/// commands on that store run inside it, through its local API's Unix
/// socket, and print exactly what they would print run directly
/// (Specs/api.md §4).
enum Forwarding {
    /// Runs a command line typed by the user: in the serving process when one serves its store, else here.
    static func execute(_ arguments: [String]) async -> Int32 {
        await Chorus.execute(arguments) { command in try await forward(arguments, command) }
    }

    /// Runs `command` in the process serving its store and returns the exit
    /// status, or returns nil when no process serves it (run it here).
    static func forward(_ arguments: [String], _ command: any ParsableCommand) async throws -> Int32? {
        guard let store = storeOptions(of: command) else { return nil }
        let socket = APIPaths.socket(inStore: store.path)
        guard FileManager.default.fileExists(atPath: socket) else { return nil }
        if command is NeedsStoreToItself {
            // `init` fails on an existing store with or without a server.
            if command is Init { return nil }
            // Say so now, instead of waiting for a writer lock the server never releases.
            guard (try? await APIClient(.unixSocket(path: socket)).send(.GET, "/health"))?.status == 200 else { return nil }
            printError(
                "error: `chorus serve` is running on \(store.path), and this command needs the store to itself; stop the server, run it, then start the server again")
            return Exit.failure
        }
        var spooled: String?
        defer {
            if let spooled {
                try? FileManager.default.removeItem(atPath: spooled)
                TemporaryFiles.unregister(spooled)
            }
        }
        if let reader = command as? any ReadsStandardInput, reader.readsStandardInput {
            spooled = try spoolStandardInput(prefix: "chorus-stdin-")
        }
        let request = CommandRequest(
            arguments: arguments, workingDirectory: FileManager.default.currentDirectoryPath, errorIsTerminal: isatty(2) == 1,
            storeVariable: ProcessInfo.processInfo.environment["CHORUS_STORE"], standardInputFile: spooled)
        do {
            return try await APIClient(.unixSocket(path: socket)).run(
                request, output: { FileHandle.standardOutput.write($0) }, error: { FileHandle.standardError.write($0) })
        } catch APIClientError.notServing {
            // A socket left by a server that is gone: the store is free.
            return nil
        } catch {
            // The connection broke mid-command (Specs/api.md §4.2): the server stopped.
            printError(
                "error: the `chorus serve` process serving \(store.path) stopped before the command finished (\(error)); what it acknowledged is stored: start the server again, or run the command with no server")
            return Exit.failure
        }
    }

    /// The `--store` options of a parsed command, if it works on a store.
    /// Found by reflection so that no command can forget to declare it.
    static func storeOptions(of command: any ParsableCommand) -> StoreOptions? {
        for child in Mirror(reflecting: command).children {
            if let group = child.value as? OptionGroup<StoreOptions> { return group.wrappedValue }
        }
        return nil
    }

    /// How the serving process runs a command line for a client: with the
    /// client's streams, directory and `CHORUS_STORE`, on its own open node.
    static func runner(node: Node) -> CommandRunner {
        { request, output, error in
            let streams = CommandStreams(
                writeOutput: output, writeError: error, errorIsTerminal: request.errorIsTerminal,
                workingDirectory: request.workingDirectory, standardInputFile: request.standardInputFile,
                storeVariable: request.storeVariable)
            return await ServedStore.$node.withValue(node) {
                await Console.$streams.withValue(streams) {
                    await Chorus.execute(request.arguments) { command in
                        guard command is NeedsStoreToItself else { return nil }
                        printError(
                            "error: this command needs the store to itself, and `chorus serve` is running on it; stop the server, run it, then start the server again")
                        return Exit.failure
                    }
                }
            }
        }
    }
}
