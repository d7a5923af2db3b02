import ArgumentParser
import ChorusNode
import Foundation

@main
struct Chorus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chorus",
        abstract: "A Chorus node: signed per-device event feeds in an embedded LMDB store.",
        discussion: """
            Exit status: 0 success; 1 the command ran but refused or found something \
            (for example an import with refused events); 2 usage, store or I/O error.
            """,
        subcommands: [
            Init.self, Whoami.self, Profile.self, Device.self, Issuer.self, Network.self, Picture.self,
            Follow.self, Unfollow.self, Like.self, Unlike.self, Block.self, Unblock.self, Chat.self, Coins.self,
            Slot.self, Query.self, Rebuild.self, Log.self, Export.self, Import.self, Serve.self, Sync.self, Peers.self,
        ])

    /// Maps every failure to exit status 2 with a message that says what was
    /// wrong; an `ExitCode` thrown by a command passes through unchanged.
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
        } catch NodeError.refused(let why) {
            // The command was understood but the node refused it (misuse).
            printError("refused: \(why)")
            Foundation.exit(Exit.refused)
        } catch {
            if exitCode(for: error) == .success { self.exit(withError: error) }  // --help, --version
            if error is ValidationError || exitCode(for: error) == .validationFailure {
                printError(fullMessage(for: error))
                printError("Run `chorus --help` (or `chorus COMMAND --help`) for usage.")
            } else {
                // Our errors describe themselves; `fullMessage` would add type names.
                printError("error: \(error)")
            }
            Foundation.exit(Exit.failure)
        }
    }
}
