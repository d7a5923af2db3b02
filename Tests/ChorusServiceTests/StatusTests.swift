#if Service
import ChorusCommands
import ChorusNode
import ChorusProjections
import ChorusService
import ChorusTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Specs/api.md §5: statuses from the failure's kind, every error body
/// `{"code", "message"}`, unknown fields, paths and methods refused.
@Suite("the local API speaks HTTP", .closingNodes)
struct StatusTests {
    static func body(_ r: APIClient.Response) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any] ?? [:]
    }

    @Test("typed endpoints answer 200, 404, 409, 422 and 400 with their codes; unknown fields, paths and methods are refused with JSON bodies")
    func statusesFromCodes() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("app"), network: NetworkConfig()))
        let serving = try await node.serveAPI(commandLine: ChorusProgram.runner(node: node))
        let api = APIClient(.socket(inStore: dir.store("app")))
        func send(_ method: HTTPMethod, _ path: String, _ json: String? = nil) async throws -> (Int, [String: Any], APIClient.Response) {
            let r = try await api.send(method, path, body: json.map { Array($0.utf8) }, contentType: "application/json")
            return (r.status, Self.body(r), r)
        }
        func expectError(
            _ answer: (Int, [String: Any], APIClient.Response), _ status: Int, _ code: String, sourceLocation: SourceLocation = #_sourceLocation
        ) {
            #expect(answer.0 == status, "\(answer.2.text)", sourceLocation: sourceLocation)
            #expect(answer.1["code"] as? String == code, "\(answer.2.text)", sourceLocation: sourceLocation)
            #expect((answer.1["message"] as? String)?.isEmpty == false, "\(answer.2.text)", sourceLocation: sourceLocation)
            #expect(answer.2.header("content-type") == "application/json", sourceLocation: sourceLocation)
        }
        let bob = String(repeating: "b0", count: 32)
        let followed = try await send(.POST, "/v1/following/\(bob)")
        #expect(followed.0 == 200 && followed.1["target"] as? String == bob && followed.1["effective"] as? Bool == true, "\(followed.2.text)")
        expectError(try await send(.POST, "/v1/following/\(bob)"), 409, "already_added")
        expectError(try await send(.POST, "/v1/following/\(node.identity.user.hex)"), 422, "self")
        expectError(try await send(.POST, "/v1/following/12"), 400, "bad_id")
        expectError(try await send(.DELETE, "/v1/blocks/\(bob)"), 409, "nothing_to_remove")
        // Chats: an unknown chat is 404, a text that cannot be sealed 400, an unknown field 400.
        expectError(try await send(.POST, "/v1/chats/\(bob)/messages", #"{"text":"to nowhere"}"#), 404, "chat_unknown")
        let chat = try await node.createChat(title: "Roofs").object
        let sent = try await send(.POST, "/v1/chats/\(chat.hex)/messages", #"{"text":"hello"}"#)
        let message = try #require(sent.1["message"] as? String, "\(sent.2.text)")
        expectError(try await send(.POST, "/v1/chats/\(chat.hex)/messages", #"{"text":"\#(String(repeating: "a", count: 4001))"}"#), 400, "text_length")
        expectError(try await send(.POST, "/v1/chats/\(chat.hex)/messages", #"{"text":"hi","colour":"red"}"#), 400, "unknown_field")
        expectError(try await send(.POST, "/v1/chats/\(chat.hex)/messages", #"{"text":5}"#), 400, "bad_field")
        expectError(try await send(.POST, "/v1/chats/\(chat.hex)/messages", #"["text"]"#), 400, "bad_body")
        expectError(try await send(.POST, "/v1/chats/\(chat.hex)/read", #"{}"#), 400, "missing_field")
        #expect(try await send(.POST, "/v1/chats/\(chat.hex)/read", #"{"message":"\#(message)"}"#).0 == 200)
        // An endpoint still answered by its command line: its errors carry a code too.
        expectError(try await send(.POST, "/v1/profile", #"{"field":"bio","value":"x","extra":1}"#), 400, "unknown_field")
        expectError(try await send(.POST, "/v1/coins/spend", #"{"amount":5,"for":"a sticker"}"#), 422, "beyond_rights")
        // Typed queries: a picture not held is 404 with its shape after the code; lists default to this node's user.
        let unknownPicture = try await send(.GET, "/v1/pictures/\(bob)")
        expectError(unknownPicture, 404, "picture_unknown")
        #expect(unknownPicture.1["status"] as? String == "unknown" && unknownPicture.1["id"] as? String == bob)
        let following = try await send(.GET, "/v1/following")
        #expect(following.0 == 200 && following.2.text == #"["\#(bob)"]"#, "\(following.2.text)")
        // Lists by pages: a Link to the next page until the last.
        let carol = String(repeating: "c0", count: 32)
        #expect(try await send(.POST, "/v1/following/\(carol)").0 == 200)
        let first = try await send(.GET, "/v1/following?limit=1")
        #expect(first.0 == 200 && first.2.text == #"["\#(bob)"]"#, "\(first.2.text)")
        let link = try #require(first.2.header("link"), "no Link header")
        #expect(link == #"</v1/following?limit=1&after=\#(bob)>; rel="next""#, "\(link)")
        let second = try await send(.GET, String(link.dropFirst().prefix { $0 != ">" }))
        #expect(second.0 == 200 && second.2.text == #"["\#(carol)"]"#, "\(second.2.text)")
        #expect(second.2.header("link") == nil)
        #expect(try await send(.GET, "/v1/following").2.header("link") == nil)
        expectError(try await send(.GET, "/v1/following?limit=-1"), 400, "bad_limit")
        expectError(try await send(.GET, "/v1/followers?after=zz"), 400, "bad_id")
        #expect(try await send(.DELETE, "/v1/following/\(carol)").0 == 200)
        expectError(try await send(.GET, "/v1/profile?user=12"), 400, "bad_id")
        let profile = try await send(.GET, "/v1/profile")
        #expect(profile.0 == 200 && profile.1["user"] as? String == node.identity.user.hex && profile.1["avatar"] is NSNull, "\(profile.2.text)")
        expectError(try await send(.GET, "/v1/chats/\(bob)"), 404, "chat_unknown")
        // A typed endpoint answers what its command prints with --json, byte for byte.
        _ = try await node.setProfile(.bio("typed"))
        let pairs: [(String, [String])] = [
            ("/v1/whoami", ["whoami"]), ("/v1/profile", ["query", "profile"]), ("/v1/chats", ["query", "chats"]),
            ("/v1/chats/\(chat.hex)?limit=10", ["query", "chat", chat.hex, "--limit", "10"]), ("/v1/balance", ["query", "balance"]),
            ("/v1/slots", ["query", "slots"]), ("/v1/following", ["query", "following", node.identity.user.hex]),
            ("/v1/likes/\(message)", ["query", "likes", message]), ("/v1/digest", ["query", "digest"]),
            ("/v1/peers", ["peers"]), ("/v1/audit", ["query", "audit"]), ("/v1/network", ["network", "show"]), ("/v1/network/invite", ["network", "invite"]),
            ("/v1/pictures", ["query", "pictures"]), ("/v1/feed", ["query", "feed"]), ("/v1/no-effect", ["query", "no-effect"]),
            ("/v1/log?limit=3&latest=true", ["log", "--limit", "3", "--latest"]), ("/v1/relays", ["relays", "show"]), ("/v1/devices", ["query", "devices"]),
        ]
        for (path, command) in pairs {
            var printed = Data()
            let status = try await api.run(
                CommandRequest(arguments: command + ["--json"], workingDirectory: dir.path), output: { printed.append($0) }, error: { _ in })
            let answered = try await send(.GET, path)
            #expect(status == 0 && answered.0 == 200, "\(path)")
            #expect(answered.2.text + "\n" == String(decoding: printed, as: UTF8.self), "\(path)")
        }
        // A typed read sends an entity tag; a client holding that answer gets 304 without a body, then 200 after a change.
        let tagged = try await api.send(.GET, "/v1/profile")
        let tag = try #require(tagged.header("etag"), "\(tagged.headers)")
        let unchanged = try await api.send(.GET, "/v1/profile", headers: [("If-None-Match", tag)])
        #expect(unchanged.status == 304 && unchanged.body.isEmpty)
        _ = try await node.setProfile(.bio("changed"))
        let changed = try await api.send(.GET, "/v1/profile", headers: [("If-None-Match", tag)])
        #expect(changed.status == 200 && changed.header("etag") != tag && changed.text.contains("changed"))
        // Uploads: not an image is bad input, a body over the limit is 413, both with codes.
        let notImage = try await api.send(.POST, "/v1/pictures", body: Array("text".utf8), contentType: "application/octet-stream")
        #expect(notImage.status == 400 && Self.body(notImage)["code"] as? String == "not_an_image", "\(notImage.text)")
        let huge = try await api.send(.POST, "/v1/pictures", body: [UInt8](repeating: 0x89, count: (64 << 20) + 1), contentType: "application/octet-stream")
        #expect(huge.status == 413, "\(huge.status) \(huge.headers) \(huge.text.prefix(300))")
        #expect(Self.body(huge)["code"] as? String == "too_large", "\(huge.text.prefix(300))")
        // Unknown paths and methods.
        expectError(try await send(.GET, "/v1/nothing-here"), 404, "not_found")
        let wrongMethod = try await send(.DELETE, "/v1/whoami")
        expectError(wrongMethod, 405, "method_not_allowed")
        #expect(wrongMethod.2.header("allow") == "GET")
        let followMethods = try await send(.GET, "/v1/following/\(bob)")
        expectError(followMethods, 405, "method_not_allowed")
        #expect(followMethods.2.header("allow") == "DELETE, POST")
        await serving.shutdown()
        await node.close()
    }
}
#endif
