import ChorusCommands
import ChorusNode
import ChorusService
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

@Suite("commands the local API runs without parsing")
struct DirectCommandTests {
    /// Runs one command line the way a serving process runs a client's.
    static func run(_ node: Node, _ arguments: [String], in directory: String) async -> CommandResult {
        let out = Mutex(Data())
        let err = Mutex(Data())
        let status = await ChorusProgram.runner(node: node)(
            CommandRequest(arguments: arguments, workingDirectory: directory),
            { data in out.withLock { $0.append(data) } }, { data in err.withLock { $0.append(data) } })
        return CommandResult(
            status: status, stdout: String(decoding: out.withLock { $0 }, as: UTF8.self),
            stderr: String(decoding: err.withLock { $0 }, as: UTF8.self))
    }

    @Test("follow, unfollow, like, unlike, block, unblock, chat send and chat read in their endpoints' shape print what the parsed command prints, refusals and no-effects included")
    func directEqualsParsed() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let template = try await Node.create(at: dir.store("template"))
        let picture = try await template.addPicture(Array(ForwardingTests.png(4, 3))).object
        let deleted = try await template.addPicture(Array(ForwardingTests.png(5, 3))).object
        _ = try await template.deletePicture(deleted)
        let chat = try await template.createChat(title: "Roofs").object
        let message = try await template.sendMessage(chat, text: "first").object
        let me = template.identity.user
        await template.close()
        // Two copies of one store: A runs the endpoints' shape (`follow --json -- USER`), B the same command parsed.
        for side in ["a", "b"] { try FileManager.default.copyItem(atPath: dir.store("template"), toPath: dir.store(side)) }
        let a = try await Node.open(at: dir.store("a"))
        let b = try await Node.open(at: dir.store("b"))
        let bob = String(repeating: "b0", count: 32)
        let cases: [(verb: String, target: String)] = [
            ("follow", bob), ("follow", bob), ("unfollow", bob), ("unfollow", bob), ("follow", me.hex),
            ("like", picture.hex), ("like", picture.hex.uppercased()), ("unlike", picture.hex), ("unlike", picture.hex),
            ("like", deleted.hex), ("block", bob), ("unblock", bob), ("unblock", bob), ("block", me.hex), ("follow", "12"),
        ]
        // The shape is what decides: these run directly, the parsed forms, a non-id and a repeated option do not.
        #expect(DirectCommands.match(["follow", "--json", "--", bob]) != nil)
        #expect(DirectCommands.match(["unlike", "--", picture.hex]) != nil)
        #expect(DirectCommands.match(["chat", "send", "--json", "--text=hi", "--", chat.hex]) != nil)
        #expect(DirectCommands.match(["chat", "read", "--json", "--", chat.hex, message.hex]) != nil)
        #expect(DirectCommands.match(["follow", bob, "--json"]) == nil)
        #expect(DirectCommands.match(["follow", "--json", "--", "12"]) == nil)
        #expect(DirectCommands.match(["chat", "--json", "--", bob]) == nil)
        #expect(DirectCommands.match(["chat", "send", "--json", "--text=a", "--text=b", "--", chat.hex]) == nil)
        #expect(DirectCommands.match(["chat", "send", "--json", "--image=x.png", "--", chat.hex]) == nil)
        #expect(DirectCommands.match(["chat", "send", "--json", "--", chat.hex]) == nil)
        #expect(DirectCommands.match(["chat", "send", "--json", "--text=", "--", chat.hex]) == nil)
        #expect(DirectCommands.match(["chat", "read", "--json", "--", chat.hex]) == nil)
        // chat send and chat read: (options, positionals) as the endpoint builds them.
        let chatCases: [(words: [String], options: [String], positionals: [String])] = [
            (["chat", "send"], ["--text=hello"], [chat.hex]),
            (["chat", "send"], ["--text=-5 = five, --json"], [chat.hex]),
            (["chat", "send"], ["--text=Olá 👋\nsecond line"], [chat.hex.uppercased()]),
            (["chat", "send"], ["--text=look", "--picture=\(picture.hex)"], [chat.hex]),
            (["chat", "send"], ["--picture=\(picture.hex)"], [chat.hex]),
            (["chat", "send"], ["--text="], [chat.hex]),
            (["chat", "send"], ["--text=to nowhere"], [bob]),
            (["chat", "send"], ["--text=bad picture", "--picture=12"], [chat.hex]),
            (["chat", "read"], [], [chat.hex, message.hex]),
            (["chat", "read"], [], [chat.hex, bob]),
            (["chat", "read"], [], [bob, message.hex]),
        ]
        var normalize = (a: Normalizer(), b: Normalizer())
        for (words, options, positionals) in chatCases {
            for json in [true, false] {
                let direct = await Self.run(a, words + (json ? ["--json"] : []) + options + ["--"] + positionals, in: dir.path)
                let parsed = await Self.run(b, words + positionals + options + (json ? ["--json"] : []), in: dir.path)
                let what = "\(words) \(options) json: \(json)"
                #expect(direct.status == parsed.status, "\(what): \(direct.stderr) / \(parsed.stderr)")
                #expect(normalize.a(direct.stdout) == normalize.b(parsed.stdout), "\(what)")
                #expect(normalize.a(direct.stderr) == normalize.b(parsed.stderr), "\(what)")
            }
        }
        for (verb, target) in cases {
            for json in [true, false] {
                let direct = await Self.run(a, [verb] + (json ? ["--json"] : []) + ["--", target], in: dir.path)
                let parsed = await Self.run(b, [verb, target] + (json ? ["--json"] : []), in: dir.path)
                let what = "\(verb) \(target) json: \(json)"
                #expect(direct.status == parsed.status, "\(what): \(direct.stderr) / \(parsed.stderr)")
                #expect(normalize.a(direct.stdout) == normalize.b(parsed.stdout), "\(what)")
                #expect(normalize.a(direct.stderr) == normalize.b(parsed.stderr), "\(what)")
            }
        }
        // Both stores hold the same events, up to ids and times: the same digest.
        #expect(try a.projections.log.eventCount() == b.projections.log.eventCount())
        #expect(try a.projections.following(me).map(\.hex) == b.projections.following(me).map(\.hex))
        #expect(try a.projections.chat(chat, limit: 100).messages.count == b.projections.chat(chat, limit: 100).messages.count)
        await a.close()
        await b.close()
    }
}
