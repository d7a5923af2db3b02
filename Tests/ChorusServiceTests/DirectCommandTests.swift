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

    @Test("follow, unfollow, like, unlike, block and unblock in their endpoints' shape print what the parsed command prints, refusals and no-effects included")
    func directEqualsParsed() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let template = try await Node.create(at: dir.store("template"))
        let picture = try await template.addPicture(Array(ForwardingTests.png(4, 3))).object
        let deleted = try await template.addPicture(Array(ForwardingTests.png(5, 3))).object
        _ = try await template.deletePicture(deleted)
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
        // The shape is what decides: these run directly, the parsed forms and a non-id do not.
        #expect(DirectCommands.match(["follow", "--json", "--", bob]) != nil)
        #expect(DirectCommands.match(["unlike", "--", picture.hex]) != nil)
        #expect(DirectCommands.match(["follow", bob, "--json"]) == nil)
        #expect(DirectCommands.match(["follow", "--json", "--", "12"]) == nil)
        #expect(DirectCommands.match(["chat", "--json", "--", bob]) == nil)
        var normalize = (a: Normalizer(), b: Normalizer())
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
        await a.close()
        await b.close()
    }
}
