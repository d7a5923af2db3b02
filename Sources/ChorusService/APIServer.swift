#if Service
import ChorusCrypto
import ChorusNode
import ChorusOperations
import ChorusStorage
import ChorusSync
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Where the local API listens and who may use it (Specs/api.md §2–3).
public struct APIConfiguration: Sendable {
    /// The Unix socket inside the store directory: owner-only, no token.
    public var socketPath: String
    /// An optional TCP address; every request on it except `/health` needs the bearer token.
    public var tcp: (host: String, port: Int)?
    /// The bearer token for TCP.
    public var token: String?
    /// The file the token was read from: read again when it changes, so a
    /// rotated token takes effect without a restart.
    public var tokenPath: String?
    /// Host names, besides loopback and the bound address, that the TCP API
    /// answers to (`chorus serve --api-host`); any other `Host` is refused
    /// (DNS rebinding).
    public var hostNames: [String] = []
    /// The largest request body (a picture, an import) accepted.
    public var maxBodyBytes = 64 << 20
    /// Connections each listener holds at most; more wait in the kernel's
    /// queue until one closes (Specs/api.md §2).
    public var maxConnections = APIConfiguration.defaultMaxConnections
    /// A connection with no complete request for this long is closed (an
    /// idle keep-alive, or a request still arriving).
    public var idleTimeout = Duration.seconds(30)

    /// An eighth of the process's descriptor limit (between 16 and 1024):
    /// the sync listener takes at most half (Specs/sync-transport.md §6a).
    public static var defaultMaxConnections: Int { max(16, min(1024, Descriptors.limit / 8)) }

    public init(socketPath: String, tcp: (host: String, port: Int)? = nil, token: String? = nil) {
        self.socketPath = socketPath
        self.tcp = tcp
        self.token = token
    }
}

/// The node's local HTTP API (Specs/api.md): the REST endpoints of
/// `CommandRoute.all`, `/v1/run` for the `chorus` command line (Unix socket
/// only), `/health`. Each listener is a `Service` for a service group.
public struct APIServer: Sendable {
    let node: Node
    let configuration: APIConfiguration
    /// Runs a `chorus` command line; nil when this server has none (an app
    /// that serves its node without the command modules).
    let runCommand: CommandRunner?
    let logger: Logger
    let metrics: ServiceMetrics?
    /// Watched queries, each observed once for all its watchers.
    let watches = WatchHub(heartbeat: APIServer.watchHeartbeat)
    let onListening: @Sendable (APIEndpoint) -> Void

    /// `metrics`: what `/metrics` exports (404 without).
    public init(
        node: Node, configuration: APIConfiguration, logger: Logger, metrics: ServiceMetrics? = nil, runCommand: CommandRunner?,
        onListening: @escaping @Sendable (APIEndpoint) -> Void = { _ in }
    ) {
        self.node = node
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        self.runCommand = runCommand
        self.onListening = onListening
    }

    /// One service per listener: the Unix socket, and TCP when configured.
    public func services() throws -> [any Service] {
        let socketPath = configuration.socketPath
        let onListening = self.onListening
        // HTTP/1.1 that may upgrade to a WebSocket (`/v1/watch/ws`), through the listener's own router.
        let idle = configuration.idleTimeout.timeAmount
        func server(_ router: Router<APIRequestContext>) -> HTTPServerBuilder {
            let webSocketResponder = router.buildResponder()
            return HTTPServerBuilder { responder in
                FirstRequestDeadline(
                    base: HTTP1WebSocketUpgradeChannel(
                        responder: responder, webSocketResponder: webSocketResponder,
                        configuration: .init(
                            http1: .init(idleTimeout: idle),
                            ws: .init(maxFrameSize: 1 << 16, autoPing: .enabled(timePeriod: Self.watchHeartbeat)))),
                    deadline: idle)
            }
        }
        let local = try router(local: true)
        let maxConnections = configuration.maxConnections
        func limit() -> MaximumAvailableConnections { MaximumAvailableConnections(maxConnections) }
        var services: [any Service] = [
            Application(
                router: local,
                server: server(local),
                configuration: .init(
                    address: .unixDomainSocket(path: socketPath), serverName: "chorus", availableConnectionsDelegate: limit()),
                onServerRunning: { _ in
                    // Owner-only, as the store directory that holds it.
                    chmod(socketPath, 0o600)
                    onListening(.unixSocket(path: socketPath))
                },
                logger: logger)
        ]
        if let (host, port) = configuration.tcp {
            guard configuration.token != nil else { throw APIServerError.tokenRequired }
            let remote = try router(local: false)
            services.append(
                Application(
                    router: remote,
                    server: server(remote),
                    configuration: .init(address: .hostname(host, port: port), serverName: "chorus", availableConnectionsDelegate: limit()),
                    onServerRunning: { channel in onListening(.tcp(host: host, port: channel.localAddress?.port ?? port)) },
                    logger: logger))
        }
        return services
    }

    func router(local: Bool) throws -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        // Requests, by route and status (Hummingbird's own metrics).
        if metrics != nil { router.add(middleware: MetricsMiddleware()) }
        router.add(middleware: SecurityHeadersMiddleware())
        router.add(middleware: ErrorAnswersMiddleware(local: local, commandLine: runCommand != nil))
        if !local, let (host, _) = configuration.tcp {
            guard let token = configuration.token else { throw APIServerError.tokenRequired }
            router.add(
                middleware: BrowserGuardMiddleware(
                    tokens: TokenSource(token: token, path: configuration.tokenPath), sessions: PageSessions(), boundHost: host,
                    extraHosts: configuration.hostNames))
        }
        for (path, type, text) in WebPage.files {
            router.get(RouterPath(path)) { _, _ in
                Response(status: .ok, headers: [.contentType: type], body: .init(byteBuffer: ByteBuffer(string: text)))
            }
        }
        router.get("/openapi.json") { _, _ in Self.json(try OpenAPIDocument.rendered()) }
        if let metrics {
            let node = self.node
            let watches = self.watches
            router.get("/metrics") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                    body: .init(byteBuffer: ByteBuffer(bytes: metrics.render(node: node, watchers: watches.watchers, watchedQueries: watches.queries))))
            }
        }
        let healthNode = self.node
        router.get("/health") { _, _ in
            let (ok, body) = await Health.check(healthNode)
            return Response(
                status: ok ? .ok : .serviceUnavailable, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: body.rendered())))
        }
        if local, let runCommand = self.runCommand {
            // Runs any command line on this node: it may read and write
            // files as the serving user, so only on the owner-only socket.
            router.post("/v1/run") { request, context in
                let body = try await request.body.collect(upTo: 1 << 20)
                guard let command = try? JSONDecoder().decode(CommandRequest.self, from: Data(buffer: body)) else {
                    return Self.errorResponse(
                        .badRequest, code: "bad_body",
                        "the body must be a JSON object with arguments, workingDirectory and errorIsTerminal (Specs/api.md §4.1)")
                }
                return Self.streamCommand(command, runCommand)
            }
        }
        for route in CommandRoute.all { add(route, to: router) }
        let node = self.node
        router.get("/v1/watch") { request, context in
            try Self.watch(request, channel: context.channel, node: node, hub: watches)
        }
        router.ws(
            "/v1/watch/ws",
            shouldUpgrade: { request, _ in
                guard request.headers[.upgrade]?.lowercased() == "websocket" else {
                    throw HTTPError(.badRequest, message: "this endpoint is a WebSocket (Upgrade: websocket); /v1/watch sends the same as server-sent events")
                }
                // The query is checked before the upgrade, so a bad one is an HTTP error.
                switch Self.watchedQuery(request, node: node) {
                case .success: return .upgrade([:])
                case .failure(let failure): throw HTTPError(.badRequest, message: failure.message)
                }
            },
            onUpgrade: { inbound, outbound, context in
                guard case .success(let answers) = Self.subscribe(context.request, node: node, hub: watches) else { return }
                try await Self.watchOverWebSocket(answers, held: context.request.uri.queryParameters["lastEventId"].map(String.init), inbound, outbound)
            })
        return router
    }

    private func add(_ route: CommandRoute, to router: Router<APIRequestContext>) {
        let maxBody = configuration.maxBodyBytes
        let node = self.node
        let handler: @Sendable (Request, APIRequestContext) async throws -> Response = { request, context in
            try await Self.respond(route, request, context, node: node, maxBody: maxBody)
        }
        let path = RouterPath(route.path)
        switch route.method {
        case .get: router.get(path, use: handler)
        case .post: router.post(path, use: handler)
        case .delete: router.delete(path, use: handler)
        }
    }

    /// Answers a request with the route's operation, or its command line
    /// with the request's values (Specs/api.md §5: the status from the
    /// failure's kind; for a command line, 200, 422 when refused or without
    /// effect, 400 otherwise).
    static func respond(
        _ route: CommandRoute, _ request: Request, _ context: APIRequestContext, node: Node, maxBody: Int
    ) async throws -> Response {
        var parameters: [String: String] = [:]
        for name in route.path.split(separator: "/").filter({ $0.hasPrefix("{") }).map({ String($0.dropFirst().dropLast()) }) {
            parameters[name] = context.parameters.get(name)
        }
        var query: [String: String] = [:]
        for (key, value) in request.uri.queryParameters { query[String(key)] = String(value) }
        var body: [String: JSONInput] = [:]
        var upload: [UInt8] = []
        do {
            if route.needsUpload {
                upload = Array(buffer: try await Self.collect(request, upTo: maxBody))
            } else if route.readsBody {
                let bytes = try await Self.collect(request, upTo: 1 << 20)
                if bytes.readableBytes > 0 {
                    guard BrowserGuardMiddleware.mediaType(request) == "application/json" else {
                        return errorResponse(
                            .unsupportedMediaType, code: "unsupported_media_type", "the body must be JSON, sent as Content-Type: application/json")
                    }
                    body = try JSONInput.body(Data(buffer: bytes))
                    if let unknown = body.keys.sorted().first(where: { !route.bodyFields.contains($0) }) {
                        throw CommandRoute.InputError.unknownField(unknown)
                    }
                }
            }
            let operationRequest = OperationRequest(parameters: parameters, query: query, body: body, upload: upload)
            switch route.answer {
            case .bytes(let bytes):
                return await bytes.answer(node, operationRequest)
            case .json(let operation):
                let (status, answer, nextPage) = await operation.answer(node, operationRequest)
                let text = answer.rendered()
                var headers: HTTPFields = [.contentType: "application/json"]
                if let nextPage, let link = HTTPFields.Element.Name("Link") { headers[link] = Self.nextLink(request, after: nextPage) }
                if route.method == .get, status == 200 {
                    // A read's entity tag is its answer's hash: a client that holds the answer is told so (304) without it.
                    let tag = "\"" + String(Blake2b.hash256(Array(text.utf8)).hex.prefix(32)) + "\""
                    headers[.eTag] = tag
                    if let held = request.headers[.ifNoneMatch], held.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == tag }) {
                        headers[.contentType] = nil
                        return Response(status: .notModified, headers: headers)
                    }
                }
                return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
            }
        } catch let error as CommandRoute.InputError {
            return errorResponse(.badRequest, code: error.failure.code, "\(error)")
        }
    }

    /// The request's body, at most `limit` bytes (413 beyond). A body cut
    /// short (the client aborted an upload) is the client's failure, 400
    /// `body_incomplete`, not the server's.
    static func collect(_ request: Request, upTo limit: Int) async throws -> ByteBuffer {
        do {
            return try await request.body.collect(upTo: limit)
        } catch let error as HTTPError {
            throw error
        } catch is NIOTooManyBytesError {
            throw HTTPError(.contentTooLarge, message: "the body is over the \(limit >> 20) MiB this endpoint takes")
        } catch {
            throw IncompleteBody(cause: "\(error)")
        }
    }

    /// The watch a request asks for with `path=` (Specs/api.md §6): its
    /// mailbox, subscribed to the query's one observation, or why not.
    static func subscribe(
        _ request: Request, node: Node, hub: WatchHub
    ) -> Result<WatchMailbox, OperationError> {
        watchedQuery(request, node: node).map { hub.subscribe($0.key, observe: $0.observe) }
    }

    /// The query a watch request names: its key (the same for the same
    /// query however its parameters are ordered) and its observation.
    static func watchedQuery(
        _ request: Request, node: Node
    ) -> Result<(key: String, observe: @Sendable () -> AsyncThrowingStream<WatchHub.Answer, any Error>), OperationError> {
        guard let target = request.uri.queryParameters["path"].map(String.init),
            let components = URLComponents(string: target),
            let (route, parameters) = CommandRoute.match(.get, components.path), let operation = route.operation
        else {
            return .failure(
                OperationError(.badInput, code: "bad_watch_path", "give path=, a GET endpoint of this API that answers JSON, e.g. path=/v1/chats/ID?limit=50"))
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] { query[item.name] = item.value ?? "" }
        let operationRequest = OperationRequest(parameters: parameters, query: query, body: [:])
        // The query, whatever order its parameters came in.
        let key = ([route.path] + parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            + query.sorted { $0.key < $1.key }.map { "?\($0.key)=\($0.value)" }).joined(separator: "\u{0}")
        return .success(
            (
                key,
                {
                    node.observe { _ in
                        let (status, body, _) = await operation.answer(node, operationRequest)
                        return WatchHub.Answer(status: status == 200 ? 0 : 1, output: Data(body.rendered().utf8))
                    }
                }
            ))
    }

    /// `/v1/watch?path=…` (Specs/api.md §6): server-sent events carrying the
    /// JSON of a GET endpoint, first at once and then after every commit that
    /// changed it, through the node's observation (equal answers are not
    /// repeated), one observation per distinct query however many watch it.
    /// Each event's id is its answer's hash: a client that reconnects with
    /// `Last-Event-ID` is not sent again the answer it holds.
    static func watch(_ request: Request, channel: any Channel, node: Node, hub: WatchHub) throws -> Response {
        let query: (key: String, observe: @Sendable () -> AsyncThrowingStream<WatchHub.Answer, any Error>)
        switch watchedQuery(request, node: node) {
        case .success(let q): query = q
        case .failure(let failure): return errorResponse(.badRequest, code: failure.code, failure.message)
        }
        let held = request.headers[FieldName("Last-Event-ID")!]
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-cache"
        // The head is written before this body runs; from then on a commit's
        // answer is written on the connection's event loop (`StreamWatcher`),
        // and this task only waits for the watch to end: the client went
        // away (a write fails, at the latest at the next heartbeat), the
        // query ended, or the server shuts down.
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                let stream = try await StreamWatcher.start(on: channel, held: held)
                let id = hub.subscribe(query.key, stream: stream, observe: query.observe)
                await withGracefulShutdownHandler {
                    await stream.done()
                } onGracefulShutdown: {
                    stream.end()
                }
                hub.leave(query.key, id)
                await stream.finish()
                try await writer.finish(nil)
            })
    }

    /// `/v1/watch/ws?path=…` (Specs/api.md §6): the answers of a watched
    /// query as WebSocket text messages, `{"id", "data"}` or `{"id",
    /// "error"}`; the client's messages are read only to notice its close.
    static func watchOverWebSocket(
        _ answers: WatchMailbox, held: String?, _ inbound: WebSocketInboundStream, _ outbound: WebSocketOutboundWriter
    ) async throws {
        defer { answers.close() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for try await _ in inbound.messages(maxSize: 1 << 16) {}
                answers.end()
            }
            try await withGracefulShutdownHandler {
                var first = true
                while let item = await answers.next() {
                    guard case .answer(let answer) = item else { continue }  // pings keep the socket alive
                    defer { first = false }
                    if first, answer.id == held { continue }
                    try await outbound.writeTextMessage(answer.message)
                }
            } onGracefulShutdown: {
                answers.end()
            }
            group.cancelAll()
        }
    }

    /// A comment line: writing it is how a client that went away is noticed.
    static let watchHeartbeatComment = ByteBuffer(string: ": keep-alive\n\n")

    static let watchHeartbeat = Duration.seconds(15)

    /// `<PATH?QUERY>; rel="next"` (RFC 8288): the same request with
    /// `after` set to the page's last id, `limit` kept (Specs/api.md §5).
    static func nextLink(_ request: Request, after: String) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+#")
        func escaped(_ text: Substring) -> String { text.addingPercentEncoding(withAllowedCharacters: allowed) ?? "" }
        var items = request.uri.queryParameters.filter { $0.key != "after" }.map { "\(escaped($0.key))=\(escaped($0.value))" }
        items.append("after=\(after)")
        return "<\(request.uri.path)?\(items.joined(separator: "&"))>; rel=\"next\""
    }

    static func errorResponse(_ status: HTTPResponse.Status, code: String, _ message: String) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: errorJSON(message, code: code))))
    }

    /// `{"code": …, "message": …}`, the body of every error answer (Specs/api.md §5).
    static func errorJSON(_ message: String, code: String) -> Data {
        Data(OperationEndpoint.errorBody(OperationError(.failed, code: code, message)).rendered().utf8)
    }

    static func json(_ data: Data) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// `/v1/run`: the command's output, error and exit status as frames, as they are written.
    /// The command is cancelled when its client goes away (as a command run
    /// directly ends with its process): a heartbeat frame every few seconds
    /// notices a client that left while the command printed nothing.
    static func streamCommand(_ command: CommandRequest, _ runCommand: @escaping CommandRunner) -> Response {
        let (stream, continuation) = AsyncStream.makeStream(of: ByteBuffer.self)
        let task = Task {
            let status = await runCommand(
                command,
                { data in for f in CommandFrame.split(data, CommandFrame.output) { continuation.yield(ByteBuffer(bytes: f.encoded)) } },
                { data in for f in CommandFrame.split(data, CommandFrame.error) { continuation.yield(ByteBuffer(bytes: f.encoded)) } })
            continuation.yield(ByteBuffer(bytes: CommandFrame.exit(status).encoded))
            continuation.finish()
        }
        let heartbeat = Self.heartbeat(every: commandHeartbeat, continuation, ByteBuffer(bytes: CommandFrame.heartbeat.encoded))
        continuation.onTermination = { reason in
            heartbeat.cancel()
            if case .cancelled = reason { task.cancel() }
        }
        return Response(status: .ok, headers: [.contentType: CommandFrame.mediaType], body: ResponseBody(asyncSequence: stream))
    }

    static let commandHeartbeat = Duration.seconds(2)

    /// Yields `beat` every `interval` until cancelled: writing to a client that
    /// went away is how a long, quiet response notices it.
    static func heartbeat(
        every interval: Duration, _ continuation: AsyncStream<ByteBuffer>.Continuation, _ beat: ByteBuffer
    ) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                continuation.yield(beat)
            }
        }
    }

}

public enum APIServerError: Error, CustomStringConvertible {
    case tokenRequired
    case cannotSpool(String)
    case notListening(String)

    public var description: String {
        switch self {
        case .tokenRequired: "the local API on TCP needs a bearer token"
        case .cannotSpool(let path): "cannot write the request body to \(path)"
        case .notListening(let path): "the local API did not start listening (\(path)): is the directory writable, the address free?"
        }
    }
}

/// The request context of the local API.
public struct APIRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Where a WebSocket upgrade keeps its handler (`/v1/watch/ws`).
    public let webSocket = WebSocketHandlerReference<Self>()
    /// The connection: a server-sent-events watch writes its answers on its event loop.
    public let channel: any Channel
    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
    /// Pictures and imports are larger than the default.
    public var maxUploadSize: Int { 64 << 20 }
}
#endif
