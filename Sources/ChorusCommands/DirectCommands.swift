import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusEvents
import ChorusNode

/// The commands a serving process runs for the local API without
/// ArgumentParser (Specs/api.md §4.4). Parsing a command line costs about
/// 0.2 ms of CPU, most of it the parser reflecting over the command's
/// properties on every parse: as much as the rest of a request's HTTP. The
/// most frequent writes of a social app (follow, unfollow, like, unlike,
/// block, unblock, sending a message with text and marking a chat read) are
/// recognised in exactly the shape their endpoints build and run through the
/// same `perform` and `report` as the parsed command, so that output and exit
/// status are the same. Any other shape, an id that is not 64 hex digits or
/// a repeated option is parsed as usual, so usage errors stay the parser's.
package enum DirectCommands {
    static let relationships: [String: any RelationshipCommand.Type] = [
        "follow": Follow.self, "unfollow": Unfollow.self, "like": Like.self, "unlike": Unlike.self,
        "block": Block.self, "unblock": Unblock.self,
    ]

    /// A command line in an endpoint's shape: words, then `--json` if
    /// present, then `--name=value` options, then `--` and the positional values.
    struct Shape {
        var words: [String] = []
        var json = false
        var options: [String: String] = [:]
        var positionals: [String] = []

        init?(_ arguments: [String]) {
            var rest = arguments[...]
            while let word = rest.first, !word.hasPrefix("-") {
                words.append(word)
                rest.removeFirst()
            }
            if rest.first == "--json" {
                json = true
                rest.removeFirst()
            }
            while let option = rest.first, option != "--" {
                // Only `--name=value` with a value, each name once: anything
                // else (`--text=` is a missing value) is the parser's to judge.
                guard option.hasPrefix("--"), let equals = option.firstIndex(of: "=") else { return nil }
                let name = String(option[option.index(option.startIndex, offsetBy: 2)..<equals])
                let value = String(option[option.index(after: equals)...])
                guard !name.isEmpty, !value.isEmpty, options[name] == nil else { return nil }
                options[name] = value
                rest.removeFirst()
            }
            guard rest.first == "--" else { return nil }
            positionals = Array(rest.dropFirst())
        }

        /// The positional values as ids, when there are exactly `count` of them and each is 64 hex digits.
        func ids(_ count: Int) -> [Bytes32]? {
            guard positionals.count == count else { return nil }
            let ids = positionals.compactMap { Bytes32(hex: $0.lowercased()) }
            return ids.count == count ? ids : nil
        }
    }

    /// The body that runs `arguments` on a node, or nil when they must be parsed.
    package static func match(_ arguments: [String]) -> ((Node) async throws -> Void)? {
        guard let shape = Shape(arguments) else { return nil }
        let json = shape.json
        func run(_ body: @escaping (Node) async throws -> MutationResult) -> (Node) async throws -> Void {
            { node in try report(try await mutationOutcome(node, body), json: json) }
        }
        if shape.words.count == 1, let command = relationships[shape.words[0]] {
            guard shape.options.isEmpty, let ids = shape.ids(1) else { return nil }
            return run { try await command.perform($0, ids[0]) }
        }
        switch shape.words {
        case ["chat", "send"]:
            // Text and an existing picture; an image file is read by the parsed command.
            guard Set(shape.options.keys).isSubset(of: ["text", "picture"]), !shape.options.isEmpty, let ids = shape.ids(1) else {
                return nil
            }
            let text = shape.options["text"]
            // A text that cannot be sealed is refused by the parsed command's validation (exit 2).
            if let text, ChatSend.textProblem(text) != nil { return nil }
            var picture: PictureID? = nil
            if let given = shape.options["picture"] {
                guard let id = Bytes32(hex: given.lowercased()) else { return nil }
                picture = PictureID(id)
            }
            return run { try await ChatSend.perform($0, ChatID(ids[0]), text: text, picture: picture, json: json) }
        case ["chat", "read"]:
            guard shape.options.isEmpty, let ids = shape.ids(2) else { return nil }
            return run { try await ChatRead.perform($0, ChatID(ids[0]), upTo: MessageID(ids[1])) }
        default:
            return nil
        }
    }
}
