import ArgumentParser
import ChorusCommandLine
import ChorusNode
import ChorusService
import Foundation

/// The `chorus` command line (README "The chorus command").
struct Chorus: ChorusCommandLineTool {
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
            Slot.self, Query.self, Rebuild.self, Upgrade.self, Compact.self, Log.self, Export.self, Import.self, Relays.self, Serve.self, Sync.self, Peers.self, APITokenCommand.self,
        ])
}

/// Runs `chorus` command lines: what the `chorus` executable does, and what
/// a serving node does for its clients.
public enum ChorusProgram {
    /// Runs one command line typed by a user (the arguments after `chorus`):
    /// inside the process serving its store when one does (Specs/api.md §4),
    /// else here. Returns the exit status.
    public static func run(_ arguments: [String]) async -> Int32 {
        await Forwarding.execute(arguments)
    }

    /// How a process serving `node` runs a client's command line on it.
    public static func runner(node: Node) -> CommandRunner { Forwarding.runner(node: node) }
}
