import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusNode
import ChorusReplay
import Foundation

@main
struct ChorusReplayCommand: ChorusCommandLineTool {
    static let configuration = CommandConfiguration(
        commandName: "chorus-replay",
        abstract: "Audit and debug a Chorus store by replaying its log. Never writes to the store it reads.",
        discussion: """
            Exit status: 0 all good; 1 a finding (damage, a fork, a projection that differs \
            from the log, a broken coin invariant); 2 a usage or I/O error.
            """,
        subcommands: [Verify.self, Rebuild.self, Diff.self, History.self, AsOf.self, Audit.self, Stats.self])

    static func main() async { await runAndExit() }
}

struct StoreOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The store to read (default: $CHORUS_STORE, else ./chorus-data).", valueName: "dir"))
    var store: String?

    var path: String { storePath(store) }

    func open() throws -> ReplayStore { try ReplayStore.open(path) }
}

func parseObject(_ text: String) throws -> Bytes32 { try parseKey(text, what: "OBJECT") }

