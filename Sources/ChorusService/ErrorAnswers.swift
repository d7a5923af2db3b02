#if Service
import Hummingbird
import HummingbirdCore

/// Answers what no endpoint answered with a JSON error body (Specs/api.md
/// §5): an unknown path 404, a known path asked with another method 405
/// with `Allow`, and any other HTTP error (a body over the limit: 413) with
/// its status, each as `{"code", "message"}`.
struct ErrorAnswersMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Methods of the endpoints outside the route table, by path: the
    /// command runner only on the Unix socket, page sessions only on TCP.
    let fixed: [String: [String]]

    init(local: Bool, commandLine: Bool) {
        var fixed = ["/health": ["GET"], "/openapi.json": ["GET"], "/metrics": ["GET"], "/v1/watch": ["GET"], "/v1/watch/ws": ["GET"]]
        if !local { fixed["/v1/session"] = ["POST", "DELETE"] } else if commandLine { fixed["/v1/run"] = ["POST"] }
        self.fixed = fixed
    }

    /// The methods `path` answers to, none when it names no endpoint.
    func allowed(_ path: String) -> [String] {
        var methods = Set(fixed[path] ?? [])
        for method in [CommandRoute.Method.get, .post, .delete] where CommandRoute.match(method, path) != nil { methods.insert(method.rawValue) }
        if WebPage.paths.contains(path) { methods.insert("GET") }
        return methods.sorted()
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as IncompleteBody {
            return APIServer.errorResponse(.badRequest, code: "body_incomplete", "the request's body ended before it was complete: \(error.cause)")
        } catch let error as HTTPError {
            let path = request.uri.path
            if error.status == .notFound {
                let allowed = allowed(path)
                if !allowed.isEmpty {
                    var response = APIServer.errorResponse(
                        .methodNotAllowed, code: "method_not_allowed",
                        "\(path.prefix(200)) answers \(allowed.joined(separator: ", ")), not \(request.method.rawValue)")
                    response.headers[.allow] = allowed.joined(separator: ", ")
                    return response
                }
                return APIServer.errorResponse(.notFound, code: "not_found", "no endpoint \(path.prefix(200)): see /openapi.json for the endpoints")
            }
            let code: String =
                switch error.status {
                case .contentTooLarge: "too_large"
                case .badRequest: "bad_request"
                case .unauthorized: "unauthorized"
                default: "http_\(error.status.code)"
                }
            var response = APIServer.errorResponse(error.status, code: code, error.body ?? error.status.reasonPhrase)
            for field in error.headers { response.headers.append(field) }
            return response
        }
    }
}

/// A request body cut short: the client aborted an upload. The client's
/// failure (400 `body_incomplete`), not the server's.
struct IncompleteBody: Error {
    let cause: String
}
#endif
