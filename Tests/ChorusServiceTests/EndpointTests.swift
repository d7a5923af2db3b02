#if Service
import ChorusService
import ChorusTestSupport
import Foundation
import NIOHTTP1
import Synchronization
import Testing

@Suite("the local API's endpoints")
struct EndpointTests {
    static let png = Data([
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, 4, 0, 0, 0, 3, 8, 2, 0, 0, 0,
    ])

    /// The stores the requests act on.
    struct Fixture {
        let alice: String
        let bob: String
        let carol: String
        let bobSyncPort: Int
        /// Device-only stores of Alice's, one per run: each run binds and unbinds one.
        let tablets: [(device: String, proof: String)]
    }

    /// Which routes a run exercised, by method and path pattern.
    final class Coverage: Sendable {
        private let seen = Mutex(Set<String>())
        func record(_ method: HTTPMethod, _ path: String) {
            let bare = String(path.prefix { $0 != "?" })
            let m = CommandRoute.Method(rawValue: method.rawValue) ?? .get
            if let (route, _) = CommandRoute.match(m, bare) { seen.withLock { _ = $0.insert("\(route.method.rawValue) \(route.path)") } }
        }
        var all: Set<String> { seen.withLock { $0 } }
    }

    static func json(_ r: APIClient.Response) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any] ?? [:]
    }

    /// Calls every endpoint once through `client`, in an order where each finds what it needs.
    static func exerciseEveryEndpoint(_ client: APIClient, _ f: Fixture, run: Int, coverage: Coverage) async throws {
        func call(
            _ method: HTTPMethod, _ path: String, _ body: [String: Any]? = nil, raw: Data? = nil, expect: Int = 200,
            sourceLocation: SourceLocation = #_sourceLocation
        ) async throws -> APIClient.Response {
            let bytes = try raw.map { Array($0) } ?? body.map { Array(try JSONSerialization.data(withJSONObject: $0)) }
            let r = try await client.send(method, path, body: bytes, contentType: raw == nil ? "application/json" : "application/octet-stream")
            #expect(r.status == expect, "\(method) \(path) (run \(run)): \(r.status) \(r.text)", sourceLocation: sourceLocation)
            let problems = AnswerSchemas.problems(CommandRoute.Method(rawValue: method.rawValue) ?? .get, path, status: r.status, body: r.body)
            #expect(problems.isEmpty, "\(method) \(path) does not answer as Specs/api.openapi.json says: \(problems) in \(r.text.prefix(2000))", sourceLocation: sourceLocation)
            coverage.record(method, path)
            return r
        }
        let me = json(try await call(.GET, "/v1/whoami"))
        let alice = try #require(me["user"] as? String)
        _ = try await call(.GET, "/v1/network")
        _ = try await call(.GET, "/v1/network/invite")
        let tablet = f.tablets[run]
        _ = try await call(.POST, "/v1/devices", ["device": tablet.device, "proof": tablet.proof, "name": "tablet \(run)"])
        _ = try await call(.GET, "/v1/devices")
        _ = try await call(.DELETE, "/v1/devices/\(tablet.device)?reason=lost")
        _ = try await call(.POST, "/v1/profile", ["field": "bio", "value": "run \(run), -starting with a dash"])
        _ = try await call(.POST, "/v1/profile", ["field": "no such field"], expect: 400)
        let profile = json(try await call(.GET, "/v1/profile?user=\(alice)"))
        #expect((profile["fields"] as? [String: Any])?["bio"] as? String == "run \(run), -starting with a dash")
        let (relayA, relayB) = (String(repeating: "ab", count: 32), String(repeating: "cd", count: 32))
        _ = try await call(.POST, "/v1/relays", ["relays": ["home=\(relayA)@relay\(run).example:7800"]])
        _ = try await call(.POST, "/v1/relays/add", ["relay": "inbox=\(relayB)@[::1]:7801"])
        let relays = json(try await call(.GET, "/v1/relays?user=\(alice)"))["relays"] as? [[String: Any]] ?? []
        #expect(relays.map { $0["address"] as? String } == ["relay\(run).example:7800", "[::1]:7801"])
        #expect(relays.map { $0["roles"] as? [String] ?? [] } == [["home"], ["inbox"]])
        _ = try await call(.DELETE, "/v1/relays/\(relayB)")
        _ = try await call(.POST, "/v1/relays", ["relays": ["not a relay"]], expect: 400)
        _ = try await call(.POST, "/v1/pictures?caption=Not%20an%20image", raw: Data("text".utf8), expect: 400)
        let added = json(try await call(.POST, "/v1/pictures?caption=Roof%20\(run)", raw: Self.png))
        let picture = try #require(added["picture"] as? String)
        _ = try await call(.GET, "/v1/pictures")
        _ = try await call(.GET, "/v1/pictures/\(picture)")
        let bytes = try await call(.GET, "/v1/pictures/\(picture)/bytes")
        #expect(Data(bytes.body) == Self.png)
        _ = try await call(.GET, "/v1/pictures/\(String(repeating: "ab", count: 32))/bytes", expect: 404)
        _ = try await call(.POST, "/v1/pictures/\(picture)/caption", ["caption": "Roof at dusk"])
        _ = try await call(.POST, "/v1/pictures/\(picture)/move", ["first": true])
        _ = try await call(.GET, "/v1/feed?limit=5")
        _ = try await call(.POST, "/v1/following/\(f.bob)")
        _ = try await call(.GET, "/v1/following?user=\(alice)")
        _ = try await call(.GET, "/v1/followers?user=\(f.bob)")
        _ = try await call(.DELETE, "/v1/following/\(f.bob)")
        _ = try await call(.POST, "/v1/likes/\(picture)")
        _ = try await call(.GET, "/v1/likes/\(picture)")
        _ = try await call(.DELETE, "/v1/likes/\(picture)")
        _ = try await call(.POST, "/v1/blocks/\(f.carol)")
        _ = try await call(.DELETE, "/v1/blocks/\(f.carol)")
        let created = json(try await call(.POST, "/v1/chats", ["title": "Run \(run)", "members": [f.bob]]))
        let chat = try #require(created["chat"] as? String)
        _ = try await call(.GET, "/v1/chats")
        let sent = json(try await call(.POST, "/v1/chats/\(chat)/messages", ["text": "hello", "picture": picture]))
        let message = try #require(sent["message"] as? String)
        _ = try await call(.GET, "/v1/chats/\(chat)?limit=10")
        _ = try await call(.POST, "/v1/chats/\(chat)/read", ["message": message])
        let inbox = try #require(try JSONSerialization.jsonObject(with: Data(try await call(.GET, "/v1/inbox?limit=1").body)) as? [[String: Any]])
        #expect(inbox.first?["unread"] as? Int == 0 && (inbox.first?["chat"] as? [String: Any])?["id"] as? String == chat)
        _ = try await call(.POST, "/v1/messages/\(message)/edit", ["text": "hello again"])
        _ = try await call(.DELETE, "/v1/messages/\(message)")
        _ = try await call(.POST, "/v1/chats/\(chat)/members", ["user": f.carol])
        _ = try await call(.DELETE, "/v1/chats/\(chat)/members/\(f.carol)")
        _ = try await call(.POST, "/v1/chats/\(chat)/leave")
        _ = try await call(.POST, "/v1/coins/credit", ["user": alice, "amount": 100, "receipt": "receipt-\(run)"])
        _ = try await call(.POST, "/v1/coins/credit", ["user": alice, "amount": 100, "receipt": "receipt-\(run)"], expect: 422)
        _ = try await call(.POST, "/v1/coins/spend", ["amount": 5, "for": "a sticker"])
        _ = try await call(.POST, "/v1/coins/give", ["user": f.bob, "amount": 1, "note": "thanks"])
        _ = try await call(.POST, "/v1/coins/move", ["device": tablet.device, "amount": 1], expect: 422)
        _ = try await call(.GET, "/v1/balance")
        _ = try await call(.POST, "/v1/slots/\(run + 1)/unlock")
        _ = try await call(.POST, "/v1/slots/\(run + 1)", ["picture": picture])
        _ = try await call(.GET, "/v1/slots")
        _ = try await call(.GET, "/v1/audit")
        _ = try await call(.GET, "/v1/digest")
        _ = try await call(.GET, "/v1/no-effect?limit=5")
        _ = try await call(.GET, "/v1/log?limit=3&kind=profile.set")
        let export = try await call(.GET, "/v1/export")
        #expect(export.body.count > 1000)
        let imported = json(try await call(.POST, "/v1/import", raw: Data(export.body)))
        #expect(imported["accepted"] as? Int == 0)
        _ = try await call(.POST, "/v1/sync", ["address": "127.0.0.1:\(f.bobSyncPort)"])
        _ = try await call(.GET, "/v1/peers")
        _ = try await call(.DELETE, "/v1/pictures/\(picture)")
        // Live: the first event is the current answer.
        struct FirstEventRead: Error {}
        var first = ""
        do {
            _ = try await client.stream(.GET, "/v1/watch?path=%2Fv1%2Fdigest") { chunk in
                first += String(decoding: chunk, as: UTF8.self)
                if first.contains("\n\n") { throw FirstEventRead() }
            }
        } catch is FirstEventRead {}
        #expect(first.hasPrefix("id: ") && first.contains(#"\#ndata: {"digest":""#), "\(first)")
    }

    @Test("every endpoint answers over the Unix socket and over TCP with the token; without it, 401")
    func everyEndpoint() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        func cli(_ arguments: [String]) async throws -> String {
            let r = try await runCommand(chorus, arguments)
            guard r.status == 0 else { throw TestFailure("chorus \(arguments): \(r.stderr)") }
            return r.stdout
        }
        func field(_ json: String, _ name: String) throws -> String {
            let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
            return try #require(object?[name] as? String)
        }
        let alice = dir.store("alice")
        _ = try await cli(["init", "--store", alice, "--name", "Alice"])
        _ = try await cli(["issuer", "create", "--store", alice])
        let aliceUser = try field(try await cli(["whoami", "--json", "--store", alice]), "user")
        var people: [String] = []
        for name in ["bob", "carol"] {
            _ = try await cli(["init", "--store", dir.store(name), "--name", name, "--network", alice + "/network.json"])
            people.append(try field(try await cli(["whoami", "--json", "--store", dir.store(name)]), "user"))
        }
        var tablets: [(String, String)] = []
        for run in 0..<2 {
            let out = try await cli(["init", "--store", dir.store("tablet\(run)"), "--user", aliceUser, "--json", "--network", alice + "/network.json"])
            tablets.append((try field(out, "device"), try field(out, "proof")))
        }
        let bobServer = try await ServerProcess.start(chorus: chorus, store: dir.store("bob"))
        defer { bobServer.kill() }
        let server = try await ServerProcess.start(chorus: chorus, store: alice, apiListen: true)
        defer { server.kill() }
        let fixture = Fixture(alice: alice, bob: people[0], carol: people[1], bobSyncPort: bobServer.syncPort, tablets: tablets)
        let token = try String(contentsOfFile: APIPaths.token(inStore: alice), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let tcpPort = try #require(server.apiPort)

        let unix = Coverage()
        try await Self.exerciseEveryEndpoint(APIClient(.socket(inStore: alice)), fixture, run: 0, coverage: unix)
        let tcp = Coverage()
        try await Self.exerciseEveryEndpoint(APIClient(.tcp(host: "127.0.0.1", port: tcpPort), token: token), fixture, run: 1, coverage: tcp)
        let routes = Set(CommandRoute.all.map { "\($0.method.rawValue) \($0.path)" })
        #expect(unix.all == routes, "not called over the socket: \(routes.subtracting(unix.all).sorted())")
        #expect(tcp.all == routes, "not called over TCP: \(routes.subtracting(tcp.all).sorted())")

        // Without the token (or with a wrong one) every endpoint on TCP is refused, before it runs.
        let before = try await cli(["query", "digest", "--json", "--store", alice])
        for (client, what) in [
            (APIClient(.tcp(host: "127.0.0.1", port: tcpPort)), "no token"),
            // Its last character changed: a token ending in "0" once came out unchanged here.
            (APIClient(.tcp(host: "127.0.0.1", port: tcpPort), token: String(token.dropLast()) + (token.hasSuffix("0") ? "1" : "0")), "a wrong token"),
        ] {
            for route in CommandRoute.all {
                let path = route.path.replacingOccurrences(of: #"\{[a-z]+\}"#, with: String(repeating: "ab", count: 32), options: .regularExpression)
                let method: HTTPMethod = route.method == .get ? .GET : route.method == .post ? .POST : .DELETE
                let r = try await client.send(method, path, body: Array(#"{"field":"bio","value":"x"}"#.utf8), contentType: "application/json")
                #expect(r.status == 401, "\(route.method.rawValue) \(route.path) with \(what): \(r.status)")
            }
            #expect(try await client.send(.POST, "/v1/run", body: Array("{}".utf8)).status == 401)
            #expect(try await client.send(.GET, "/health").status == 200)
            #expect(try await client.send(.GET, "/").status == 200)
        }
        #expect(try await cli(["query", "digest", "--json", "--store", alice]) == before)
        // The command runner is on the owner-only socket only.
        let onTCP = try await APIClient(.tcp(host: "127.0.0.1", port: tcpPort), token: token).send(.POST, "/v1/run", body: Array("{}".utf8))
        #expect(onTCP.status == 404)
        // The socket is owner-only.
        let attributes = try FileManager.default.attributesOfItem(atPath: APIPaths.socket(inStore: alice))
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(await server.stop() == 0)
    }

    @Test("Specs/api.openapi.json is the document the route table makes (CHORUS_WRITE_OPENAPI=1 rewrites it)")
    func openAPIDocumentIsCurrent() async throws {
        let path = repositoryRoot.appendingPathComponent("Specs/api.openapi.json").path
        let made = try OpenAPIDocument.rendered()
        if ProcessInfo.processInfo.environment["CHORUS_WRITE_OPENAPI"] == "1" {
            try made.write(to: URL(fileURLWithPath: path))
        }
        let committed = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(committed == made, "Specs/api.openapi.json differs from the route table: run CHORUS_WRITE_OPENAPI=1 swift test --traits Service --filter openAPIDocumentIsCurrent")
        // Every route is in it with its method.
        let object = try JSONSerialization.jsonObject(with: committed) as? [String: Any]
        let paths = try #require(object?["paths"] as? [String: [String: Any]])
        for route in CommandRoute.all {
            #expect(paths[route.path]?[route.method.rawValue.lowercased()] != nil, "\(route.method.rawValue) \(route.path)")
        }
    }

    @Test("every time in an answer has its readable form beside it (Specs/api.md §5, Times)")
    func everyTimeHasItsReadableForm() throws {
        let document = try JSONSerialization.jsonObject(with: try OpenAPIDocument.rendered()) as? [String: Any]
        // The time fields answers have; `hlc` pairs with `time`, the others with `F_time`.
        // A time field is an integer, or a map of them by user (`read`).
        let times = ["hlc", "created", "since", "added", "removed", "edited", "deleted", "last_activity", "read"]
        func isTime(_ schema: Any?) -> Bool {
            guard let schema = schema as? [String: Any] else { return false }
            if schema["type"] as? String == "integer" { return true }
            if schema["type"] as? String == "object", isTime(schema["additionalProperties"]) { return true }
            return (schema["anyOf"] as? [[String: Any]])?.contains { $0["type"] as? String == "integer" } == true
        }
        var checked = 0
        func walk(_ node: Any?, at path: String) {
            if let list = node as? [Any] {
                for (i, item) in list.enumerated() { walk(item, at: "\(path)[\(i)]") }
                return
            }
            guard let object = node as? [String: Any] else { return }
            if let properties = object["properties"] as? [String: Any] {
                for name in times where isTime(properties[name]) {
                    let readable = name == "hlc" ? "time" : name + "_time"
                    checked += 1
                    #expect(properties[readable] != nil, "\(path): \(name) has no \(readable)")
                }
            }
            for (key, value) in object { walk(value, at: "\(path)/\(key)") }
        }
        walk(document, at: "")
        // Pictures, messages, events, devices, chats, members, inbox rows, chat pages, relay lists, audit steps.
        #expect(checked >= 13)
    }
}
#endif
