#if Service
import ChorusCommands
import ChorusNode
import ChorusProjections
import ChorusService
import ChorusTestSupport
import Foundation
import Logging
import ServiceLifecycle
import Testing

/// Specs/api.md §3: the TCP API refuses what a web page on another port or
/// host, or a DNS-rebound name, could make a browser send; the page's own
/// credential is a short-lived session, never the token, never a cookie.
@Suite("the local API is safe to expose to a browser", .closingNodes)
struct BrowserSafetyTests {
    /// The TCP API of a fresh node.
    struct Served {
        let node: Node
        let group: ServiceGroup
        let task: Task<Void, Never>
        let port: Int
        let tokenPath: String
        var token: String

        var client: APIClient { APIClient(.tcp(host: "127.0.0.1", port: port)) }
        var origin: String { "http://127.0.0.1:\(port)" }
        var host: String { "127.0.0.1:\(port)" }

        func bio() throws -> String? {
            guard case .text(let t) = try node.projections.profile(node.identity.user).fields.first(where: { $0.name == "bio" })?.value else {
                return nil
            }
            return t
        }

        func stop() async {
            await group.triggerGracefulShutdown()
            await task.value
            await node.close()
        }
    }

    static func serve(_ dir: TempDir, idleTimeout: Duration = .seconds(30)) async throws -> Served {
        let node = opened(try await Node.create(at: dir.store("node"), network: NetworkConfig()))
        let tokenPath = dir.store("node") + "/keys/api.token"
        let token = try APIToken.loadOrCreate(at: tokenPath)
        var configuration = APIConfiguration(socketPath: dir.store("node") + "/api.sock", tcp: ("127.0.0.1", 0), token: token)
        configuration.tokenPath = tokenPath
        configuration.idleTimeout = idleTimeout
        let (listening, continuation) = AsyncStream.makeStream(of: APIEndpoint.self)
        let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        let server = APIServer(
            node: node, configuration: configuration, logger: logger, runCommand: ChorusProgram.runner(node: node),
            onListening: { continuation.yield($0) })
        let group = ServiceGroup(configuration: .init(services: try server.services(), logger: logger))
        let task = Task {
            try? await group.run()
            continuation.finish()
        }
        var port: Int?
        for await endpoint in listening {
            if case .tcp(_, let p) = endpoint { port = p }
            if port != nil { break }
        }
        return Served(node: node, group: group, task: task, port: try #require(port), tokenPath: tokenPath, token: token)
    }

    static let bio = Array(#"{"field":"bio","value":"written by a page"}"#.utf8)

    @Test("a Host other than loopback, localhost and the configured names is refused on every path (DNS rebinding)")
    func foreignHostIsRefused() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let s = try await Self.serve(dir)
        for path in ["/", "/health", "/app.js", "/v1/whoami", "/v1/nothing"] {
            let r = try await s.client.send(.GET, path, headers: [("Host", "rebound.example:\(s.port)"), ("Authorization", "Bearer \(s.token)")])
            #expect(r.status == 421, "\(path): \(r.status)")
            #expect(r.text.contains(#""code":"host_not_allowed""#))
        }
        for host in ["localhost:\(s.port)", "127.0.0.1:\(s.port)", "LOCALHOST", "[::1]:\(s.port)"] {
            let r = try await s.client.send(.GET, "/v1/whoami", headers: [("Host", host), ("Authorization", "Bearer \(s.token)")])
            #expect(r.status == 200, "\(host): \(r.status)")
        }
        await s.stop()
    }

    @Test("a write from another origin, or with a body a form could send, changes nothing")
    func crossOriginWritesAreRefused() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let s = try await Self.serve(dir)
        let auth = ("Authorization", "Bearer \(s.token)")
        let host = ("Host", s.host)
        for (headers, status, code) in [
            ([("Origin", "http://127.0.0.1:8000")], 403, "cross_origin"),
            ([("Origin", "http://localhost:\(s.port)")], 403, "cross_origin"),
            ([("Origin", "null")], 403, "cross_origin"),
            ([("Sec-Fetch-Site", "same-site")], 403, "cross_origin"),
            ([("Sec-Fetch-Site", "cross-site")], 403, "cross_origin"),
        ] {
            let r = try await s.client.send(.POST, "/v1/profile", body: Self.bio, contentType: "application/json", headers: [auth, host] + headers)
            #expect(r.status == status && r.text.contains(code), "\(headers): \(r.status) \(r.text)")
        }
        for type in ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            let r = try await s.client.send(.POST, "/v1/profile", body: Self.bio, contentType: type, headers: [auth])
            #expect(r.status == 415, "\(type): \(r.status) \(r.text)")
            let upload = try await s.client.send(.POST, "/v1/pictures", body: Array("x".utf8), contentType: type, headers: [auth])
            #expect(upload.status == 415, "an upload as \(type): \(upload.status)")
        }
        // A JSON body needs its media type on the owner's socket too.
        let socket = APIClient(.socket(inStore: dir.store("node")))
        #expect(try await socket.send(.POST, "/v1/profile", body: Self.bio).status == 415)
        #expect(try s.bio() == nil, "nothing was written")
        // The API's own origin, and a client that is no browser page, may write.
        let same = try await s.client.send(.POST, "/v1/profile", body: Self.bio, contentType: "application/json", headers: [auth, host, ("Origin", s.origin), ("Sec-Fetch-Site", "same-origin")])
        #expect(same.status == 200, "\(same.text)")
        let plain = try await s.client.send(.POST, "/v1/profile", body: Self.bio, contentType: "application/json", headers: [("Authorization", "bEaReR \(s.token)")])
        #expect(plain.status == 200, "the scheme in any case: \(plain.text)")
        #expect(try s.bio() == "written by a page")
        await s.stop()
    }

    @Test("the page's session is its own credential: same origin and host only, no cookie, ended by a token rotation")
    func pageSessions() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        var s = try await Self.serve(dir)
        // The page (Sec-Fetch-Site: same-origin, Origin: its own) exchanges the token once.
        let made = try await s.client.send(
            .POST, "/v1/session", headers: [("Authorization", "Bearer \(s.token)"), ("Origin", s.origin), ("Host", s.host)])
        #expect(made.status == 200)
        #expect(made.header("Set-Cookie") == nil, "no credential in a cookie")
        let object = try JSONSerialization.jsonObject(with: Data(made.body)) as? [String: Any]
        let session = try #require(object?["session"] as? String)
        #expect(session != s.token && (object?["expires_in"] as? Int ?? 0) > 0)
        // A page on another port cannot make one from a token it got hold of.
        let foreign = try await s.client.send(
            .POST, "/v1/session", headers: [("Authorization", "Bearer \(s.token)"), ("Origin", "http://127.0.0.1:8000")])
        #expect(foreign.status == 403)
        // The session works only where a browser says the request is same-origin, for the host it was made on.
        let bearer = ("Authorization", "Bearer \(session)")
        #expect(try await s.client.send(.GET, "/v1/whoami", headers: [bearer, ("Host", s.host), ("Sec-Fetch-Site", "same-origin")]).status == 200)
        #expect(try await s.client.send(.GET, "/v1/whoami", headers: [bearer, ("Host", s.host)]).status == 401)
        #expect(try await s.client.send(.GET, "/v1/whoami", headers: [bearer, ("Host", s.host), ("Sec-Fetch-Site", "same-site")]).status == 401)
        #expect(
            try await s.client.send(.GET, "/v1/whoami", headers: [bearer, ("Host", "localhost:\(s.port)"), ("Sec-Fetch-Site", "same-origin")]).status
                == 401)
        let write = try await s.client.send(
            .POST, "/v1/profile", body: Self.bio, contentType: "application/json",
            headers: [bearer, ("Host", s.host), ("Origin", s.origin), ("Sec-Fetch-Site", "same-origin")])
        #expect(write.status == 200, "\(write.text)")
        // The API token is no page session: there is nothing to end with it.
        let notASession = try await s.client.send(.DELETE, "/v1/session", headers: [("Authorization", "Bearer \(s.token)")])
        #expect(notASession.status == 400 && notASession.text.contains("no_page_session"), "\(notASession.text)")
        // Rotating the token ends the old token and every session made with it, at once.
        let old = s.token
        s.token = try APIToken.rotate(at: s.tokenPath)
        #expect(s.token != old)
        #expect(try await s.client.send(.GET, "/v1/whoami", headers: [("Authorization", "Bearer \(old)")]).status == 401)
        #expect(try await s.client.send(.GET, "/v1/whoami", headers: [bearer, ("Host", s.host), ("Sec-Fetch-Site", "same-origin")]).status == 401)
        #expect(try await s.client.send(.GET, "/v1/whoami", headers: [("Authorization", "Bearer \(s.token)")]).status == 200)
        await s.stop()
    }

    @Test("every answer carries the page's policy headers; the page has no inline script or style")
    func policyHeaders() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let s = try await Self.serve(dir)
        let socket = APIClient(.socket(inStore: dir.store("node")))
        for (client, path, auth) in [
            (s.client, "/", false), (s.client, "/app.js", false), (s.client, "/v1/whoami", true), (s.client, "/v1/whoami", false),
            (s.client, "/v1/nothing", true), (socket, "/v1/whoami", false), (socket, "/health", false),
        ] {
            let r = try await client.send(.GET, path, headers: auth ? [("Authorization", "Bearer \(s.token)")] : [])
            #expect(r.header("Content-Security-Policy")?.contains("script-src 'self'") == true, "\(path)")
            #expect(r.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") == true, "\(path)")
            #expect(r.header("X-Frame-Options") == "DENY" && r.header("X-Content-Type-Options") == "nosniff", "\(path)")
            #expect(r.header("Referrer-Policy") == "no-referrer" && r.header("Cache-Control") == "no-store", "\(path)")
        }
        let page = try await s.client.send(.GET, "/").text
        #expect(!page.contains("<script>") && !page.contains("<style>") && page.contains(#"<script src="/app.js">"#))
        await s.stop()
    }

    @Test("a request that never completes is closed after the idle timeout")
    func halfSentRequestsAreClosed() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let s = try await Self.serve(dir, idleTimeout: .seconds(1))
        let fd = try #require(rawTCPConnection(port: s.port))
        defer { close(fd) }
        let partial = Array("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".utf8)
        #expect(write(fd, partial, partial.count) == partial.count)
        // Closed by the server: a read sees end of file (bounded: 20 s, the timeout is 1 s).
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let closed = try await offThePool { () -> Bool in
            var byte: UInt8 = 0
            return recv(fd, &byte, 1, 0) == 0
        }
        #expect(closed, "the half-sent request was not closed")
        await s.stop()
    }
}
#endif
