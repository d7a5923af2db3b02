import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// Where a node's local API listens (Specs/api.md §2).
public enum APIEndpoint: Sendable, Equatable, CustomStringConvertible {
    case unixSocket(path: String)
    case tcp(host: String, port: Int)

    /// The socket a serving node opens inside its store directory.
    public static func socket(inStore store: String) -> APIEndpoint { .unixSocket(path: APIPaths.socket(inStore: store)) }

    public var description: String {
        switch self {
        case .unixSocket(let path): "unix:\(path)"
        case .tcp(let host, let port): "\(host):\(port)"
        }
    }
}

public enum APIPaths {
    /// The local API's Unix socket (Specs/api.md §2).
    public static func socket(inStore store: String) -> String { store + "/api.sock" }
    /// The bearer token for the API over TCP (Specs/api.md §3).
    public static func token(inStore store: String) -> String { store + "/keys/api.token" }
}

public enum APIClientError: Error, CustomStringConvertible, Equatable {
    /// Nothing listens there (no server, or a socket left by one that crashed).
    case notServing(String)
    case connection(String)
    case protocolError(String)

    public var description: String {
        switch self {
        case .notServing(let endpoint): "no node serves the local API at \(endpoint)"
        case .connection(let why): "the local API connection failed: \(why)"
        case .protocolError(let why): "the local API answered something unexpected: \(why)"
        }
    }
}

/// A small HTTP/1.1 client for a node's local API, over its Unix socket or
/// TCP: what `chorus` uses to reach a serving node, and what the tests use.
public struct APIClient: Sendable {
    public let endpoint: APIEndpoint
    public let token: String?

    public init(_ endpoint: APIEndpoint, token: String? = nil) {
        self.endpoint = endpoint
        self.token = token
    }

    public struct Response: Sendable {
        public let status: Int
        public let headers: [(String, String)]
        public let body: [UInt8]

        public var text: String { String(decoding: body, as: UTF8.self) }
        public func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    }

    /// Sends one request and collects the whole response. `headers` are
    /// sent as well (a `Host` among them replaces the default, `localhost`).
    public func send(
        _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, contentType: String? = nil, headers: [(String, String)] = []
    ) async throws -> Response {
        var collected: [UInt8] = []
        let (status, received) = try await stream(method, path, body: body, contentType: contentType, headers: headers) { collected += $0 }
        return Response(status: status, headers: received, body: collected)
    }

    /// Sends one request and hands the response body to `onBody` as it arrives.
    public func stream(
        _ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, contentType: String? = nil, headers: [(String, String)] = [],
        onBody: (ByteBufferView) async throws -> Void
    ) async throws -> (status: Int, headers: [(String, String)]) {
        try await connect().executeThenClose { inbound, outbound in
            var responses = inbound.makeAsyncIterator()
            return try await exchange(
                method, path, body: body, contentType: contentType, extraHeaders: headers, keepAlive: false, responses: &responses,
                outbound: outbound, onBody: onBody)
        }
    }

    /// Runs `body` with one kept-alive connection for many requests in turn
    /// (as a browser or `curl` with several URLs does): no connection set-up per request.
    public func withConnection<T>(_ body: (inout Connection) async throws -> T) async throws -> T {
        try await connect().executeThenClose { inbound, outbound in
            var connection = Connection(client: self, responses: inbound.makeAsyncIterator(), outbound: outbound)
            return try await body(&connection)
        }
    }

    /// A kept-alive connection (`withConnection`): requests one after another.
    public struct Connection {
        let client: APIClient
        var responses: NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator
        let outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>

        public mutating func send(_ method: HTTPMethod, _ path: String, body: [UInt8]? = nil, contentType: String? = nil) async throws
            -> Response
        {
            var collected: [UInt8] = []
            let (status, headers) = try await client.exchange(
                method, path, body: body, contentType: contentType, keepAlive: true, responses: &responses, outbound: outbound
            ) { collected += $0 }
            return Response(status: status, headers: headers, body: collected)
        }
    }

    private func connect() async throws -> NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart> {
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(.seconds(5))
        let initializer: @Sendable (any Channel) -> EventLoopFuture<NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>> = {
            channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHTTPClientHandlers()
                return try NIOAsyncChannel(wrappingChannelSynchronously: channel)
            }
        }
        do {
            switch endpoint {
            case .unixSocket(let path): return try await bootstrap.connect(unixDomainSocketPath: path, channelInitializer: initializer)
            case .tcp(let host, let port): return try await bootstrap.connect(host: host, port: port, channelInitializer: initializer)
            }
        } catch let error as IOError where [ECONNREFUSED, ENOENT].contains(error.errnoCode) {
            throw APIClientError.notServing(endpoint.description)
        } catch {
            throw APIClientError.connection("\(error)")
        }
    }

    /// Sends one request and reads its response, handing the body to `onBody` as it arrives.
    func exchange(
        _ method: HTTPMethod, _ path: String, body: [UInt8]?, contentType: String?, extraHeaders: [(String, String)] = [], keepAlive: Bool,
        responses: inout NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator,
        outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>, onBody: (ByteBufferView) async throws -> Void
    ) async throws -> (status: Int, headers: [(String, String)]) {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "localhost")
        for (name, value) in extraHeaders {
            if name.lowercased() == "host" { headers.replaceOrAdd(name: "Host", value: value) } else { headers.add(name: name, value: value) }
        }
        headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let contentType { headers.add(name: "Content-Type", value: contentType) }
        headers.add(name: "Content-Length", value: String(body?.count ?? 0))
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: path, headers: headers)
        // A server may answer before reading the whole request (a 401)
        // and close: the answer is still read.
        var writeError: (any Error)?
        do {
            try await outbound.write(.head(head))
            if let body, !body.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
            try await outbound.write(.end(nil))
        } catch {
            writeError = error
        }
        var response: (Int, [(String, String)])?
        while let part = try await responses.next() {
            switch part {
            case .head(let h): response = (Int(h.status.code), h.headers.map { ($0.name, $0.value) })
            case .body(let buffer): try await onBody(buffer.readableBytesView)
            case .end:
                guard let response else { throw APIClientError.protocolError("a response without a head") }
                return response
            }
        }
        throw APIClientError.connection(
            "the server closed the connection before the response ended" + (writeError.map { " (sending failed: \($0))" } ?? ""))
    }

    /// Runs a command line in the serving process (Specs/api.md §4): its
    /// output and error reach the two functions as they are written; returns
    /// the command's exit status.
    public func run(
        _ request: CommandRequest, output: (Data) -> Void, error: (Data) -> Void
    ) async throws -> Int32 {
        let body = try JSONEncoder().encode(request)
        var pending = Data()
        var status: Int32?
        let (code, _) = try await stream(.POST, "/v1/run", body: Array(body), contentType: "application/json") { chunk in
            pending.append(contentsOf: chunk)
            for frame in try CommandFrame.decode(from: &pending) {
                switch frame {
                case .output(let d): output(d)
                case .error(let d): error(d)
                case .exit(let s): status = s
                case .heartbeat: break
                }
            }
        }
        guard code == 200 else { throw APIClientError.protocolError("HTTP status \(code) for a command") }
        guard let status else { throw APIClientError.connection("the serving process ended before the command finished") }
        return status
    }
}
