import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusNode

/// The commands a serving process runs for the local API without
/// ArgumentParser (Specs/api.md §4.4). Parsing a command line costs about
/// 0.2 ms of CPU, most of it the parser reflecting over the command's
/// properties on every parse: as much as the rest of a request's HTTP. The
/// one-target social mutations (follow, unfollow, like, unlike, block,
/// unblock), the most frequent writes of a social app, are recognised in
/// exactly the shape their endpoints build (`follow --json -- USER`) and run
/// through the same `perform` and `report` as the parsed command, so that
/// output and exit status are the same; any other shape, or an argument that
/// is not 64 hex digits, is parsed as usual.
package enum DirectCommands {
    static let relationships: [String: any RelationshipCommand.Type] = [
        "follow": Follow.self, "unfollow": Unfollow.self, "like": Like.self, "unlike": Unlike.self,
        "block": Block.self, "unblock": Unblock.self,
    ]

    /// The body that runs `arguments` on a node, or nil when they must be parsed.
    package static func match(_ arguments: [String]) -> ((Node) async throws -> Void)? {
        let json: Bool
        let target: String
        switch arguments.count {
        case 4 where arguments[1] == "--json" && arguments[2] == "--":
            (json, target) = (true, arguments[3])
        case 3 where arguments[1] == "--":
            (json, target) = (false, arguments[2])
        default:
            return nil
        }
        guard let command = relationships[arguments[0]], let key = Bytes32(hex: target.lowercased()) else { return nil }
        return { node in try report(try await mutationOutcome(node) { try await command.perform($0, key) }, json: json) }
    }
}
