import ArgumentParser
import ChorusCommandLine
import Foundation

@main
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
            Slot.self, Query.self, Rebuild.self, Upgrade.self, Log.self, Export.self, Import.self, Serve.self, Sync.self, Peers.self,
        ])

    static func main() async {
        Foundation.exit(await Forwarding.execute(Array(CommandLine.arguments.dropFirst())))
    }
}
