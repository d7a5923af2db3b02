#if Service
import Foundation
import Hummingbird
import HummingbirdCore
import NIOCore
import Synchronization

/// A header's name (swift-http-types' `HTTPField.Name`, which Hummingbird does not re-export).
typealias FieldName = HTTPFields.Element.Name

/// Headers every answer of the local API carries, on both listeners
/// (Specs/api.md §3.2): the page runs only its own script and style, is
/// never framed, sniffed, cached or named in a Referer.
struct SecurityHeadersMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        Self.add(to: &response.headers)
        return response
    }

    static let xFrameOptions = FieldName("X-Frame-Options")!
    static let referrerPolicy = FieldName("Referrer-Policy")!

    static func add(to headers: inout HTTPFields) {
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[xFrameOptions] = "DENY"
        headers[.xContentTypeOptions] = "nosniff"
        headers[referrerPolicy] = "no-referrer"
        headers[.cacheControl] = "no-store"
    }
}

/// The API token, read again from its file whenever the file changes, so
/// `chorus api token rotate` takes effect on a running server at once.
final class TokenSource: Sendable {
    private struct State {
        var token: [UInt8]
        var stamp: FileStamp?
        var generation = 0
    }
    private struct FileStamp: Equatable {
        let inode: UInt64
        let seconds: Int
        let nanoseconds: Int
        let size: Int64
    }
    private let path: String?
    private let state: Mutex<State>

    init(token: String, path: String?) {
        self.path = path
        state = Mutex(State(token: Array(token.utf8), stamp: path.flatMap(Self.stamp)))
    }

    private static func stamp(_ path: String) -> FileStamp? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return FileStamp(
            inode: UInt64(info.st_ino), seconds: Int(info.st_mtim.tv_sec), nanoseconds: Int(info.st_mtim.tv_nsec), size: Int64(info.st_size))
    }

    /// The current token and how many times it has changed (page sessions
    /// made before a change end with it).
    func current() -> (token: [UInt8], generation: Int) {
        let now = path.flatMap(Self.stamp)
        return state.withLock { s in
            if let path, now != s.stamp, let data = FileManager.default.contents(atPath: path) {
                let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                if token.count >= 32 {
                    if Array(token.utf8) != s.token { s.generation += 1 }
                    s.token = Array(token.utf8)
                }
                s.stamp = now
            }
            return (s.token, s.generation)
        }
    }
}

/// Short-lived credentials of the page (Specs/api.md §3.1): made from the
/// API token by `POST /v1/session`, held by the page in its own origin's
/// storage and sent as a bearer token, never as a cookie (browsers send
/// cookies to every port of a host). A session works only for the host it
/// was made on and only on requests a browser marks as same-origin.
final class PageSessions: Sendable {
    static let lifetime = Duration.seconds(12 * 3600)
    static let maximum = 64

    private struct Session {
        let host: String
        let expires: ContinuousClock.Instant
        let generation: Int
    }
    private let sessions = Mutex<[String: Session]>([:])

    /// A new session for `host`; the oldest goes when there are too many.
    func create(host: String, generation: Int) -> String {
        let id = "s-" + APIToken.fresh()
        let now = ContinuousClock.now
        sessions.withLock { all in
            all = all.filter { $0.value.expires > now && $0.value.generation == generation }
            if all.count >= Self.maximum, let oldest = all.min(by: { $0.value.expires < $1.value.expires })?.key {
                all.removeValue(forKey: oldest)
            }
            all[id] = Session(host: host, expires: now + Self.lifetime, generation: generation)
        }
        return id
    }

    /// Whether `id` is a live session made on `host` since the token last changed.
    func isValid(_ id: Substring, host: String, generation: Int) -> Bool {
        let now = ContinuousClock.now
        return sessions.withLock { all in
            guard let s = all[String(id)] else { return false }
            guard s.expires > now, s.generation == generation else {
                all.removeValue(forKey: String(id))
                return false
            }
            return s.host == host
        }
    }

    func end(_ id: Substring) { _ = sessions.withLock { $0.removeValue(forKey: String(id)) } }
}

/// What the TCP listener checks before anything runs (Specs/api.md §3):
/// the `Host` (against DNS rebinding), the credential (the API token, or a
/// page session on a same-origin request), `Origin` and `Sec-Fetch-Site` on
/// every request that changes state, and the body's media type (no form or
/// text body a cross-origin page could send without a preflight).
struct BrowserGuardMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    let tokens: TokenSource
    let sessions: PageSessions
    /// Host names (lowercase, without port) this listener answers to.
    let hosts: Set<String>

    init(tokens: TokenSource, sessions: PageSessions, boundHost: String, extraHosts: [String]) {
        self.tokens = tokens
        self.sessions = sessions
        var hosts: Set<String> = ["localhost", "127.0.0.1", "[::1]"]
        let bound = boundHost.contains(":") && !boundHost.hasPrefix("[") ? "[\(boundHost)]" : boundHost
        // A wildcard address is not a name a client uses.
        if !["0.0.0.0", "[::]"].contains(bound) { hosts.insert(bound.lowercased()) }
        for name in extraHosts { hosts.insert(name.lowercased()) }
        self.hosts = hosts
    }

    static let secFetchSite = FieldName("Sec-Fetch-Site")!

    /// The host name of a `Host` value, without its port, lowercase.
    static func hostName(_ authority: String) -> String {
        let lower = authority.lowercased()
        if lower.hasPrefix("["), let close = lower.firstIndex(of: "]") { return String(lower[...close]) }
        return String(lower.prefix { $0 != ":" })
    }

    /// Constant time in the token's length: no timing hint of how much matched.
    static func matches(_ given: Substring, _ token: [UInt8]) -> Bool {
        let bytes = Array(given.utf8)
        var difference = UInt8(bytes.count == token.count ? 0 : 1)
        for i in token.indices { difference |= token[i] ^ (i < bytes.count ? bytes[i] : 0) }
        return difference == 0
    }

    /// The credential of `Authorization: Bearer X` (the scheme in any case).
    static func bearer(_ request: Request) -> Substring? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return parts[1].drop { $0 == " " }
    }

    /// Media types a cross-origin page can send without a CORS preflight.
    static let simpleMediaTypes: Set<String> = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]

    static func mediaType(_ request: Request) -> String? {
        request.headers[.contentType].map { $0.split(separator: ";")[0].trimmingCharacters(in: .whitespaces).lowercased() }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let authority = request.head.authority, case let host = Self.hostName(authority), hosts.contains(host) else {
            return APIServer.errorResponse(
                .misdirectedRequest, code: "host_not_allowed",
                "this API answers only to the Host names \(hosts.sorted().joined(separator: ", ")) (chorus serve --api-host NAME adds one)")
        }
        let origin = request.headers[.origin]
        let site = request.headers[Self.secFetchSite]?.lowercased()
        let ownOrigin = "http://" + authority.lowercased()
        let sameOrigin = origin.map { $0.lowercased() == ownOrigin } ?? (site == "same-origin")
        let crossOrigin = (origin != nil && origin?.lowercased() != ownOrigin) || (site != nil && site != "same-origin" && site != "none")
        let changesState = ![.get, .head].contains(request.method)
        if changesState && crossOrigin {
            return APIServer.errorResponse(
                .forbidden, code: "cross_origin", "a request that changes state must come from this API's own origin (\(ownOrigin)) or from no browser page")
        }
        if changesState, let media = Self.mediaType(request), Self.simpleMediaTypes.contains(media) {
            return APIServer.errorResponse(
                .unsupportedMediaType, code: "unsupported_media_type", "a body of type \(media) is not accepted: send application/json (or the raw file)")
        }
        let path = request.uri.path
        // The page and its files hold no data; health is for probes.
        if WebPage.paths.contains(path) || path == "/health" { return try await next(request, context) }
        let (token, generation) = tokens.current()
        let given = Self.bearer(request)
        if let given, Self.matches(given, token) {
            if path == "/v1/session" && request.method == .post {
                guard sameOrigin || (origin == nil && site == nil) else {
                    return APIServer.errorResponse(.forbidden, code: "cross_origin", "a page session is made only by this API's own page")
                }
                let id = sessions.create(host: host, generation: generation)
                let body = #"{"expires_in":\#(Int(PageSessions.lifetime.components.seconds)),"session":"\#(id)"}"#
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
            }
            if path == "/v1/session" && request.method == .delete {
                return APIServer.errorResponse(
                    .badRequest, code: "no_page_session",
                    "this request carries the API token, not a page session: there is no session to end (send the page session as the bearer)")
            }
            return try await next(request, context)
        }
        if let given, sameOrigin, sessions.isValid(given, host: host, generation: generation) {
            if path == "/v1/session" && request.method == .delete {
                sessions.end(given)
                return Response(status: .noContent)
            }
            return try await next(request, context)
        }
        var headers = HTTPFields()
        headers[.wwwAuthenticate] = "Bearer"
        headers[.contentType] = "application/json"
        return Response(
            status: .unauthorized, headers: headers,
            body: .init(
                byteBuffer: ByteBuffer(
                    bytes: APIServer.errorJSON(
                        "this endpoint needs Authorization: Bearer TOKEN (the token is in keys/api.token in the store); a browser opens /#token=TOKEN once",
                        code: "unauthorized"))))
    }
}
#endif
