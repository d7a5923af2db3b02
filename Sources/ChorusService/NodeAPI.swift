#if Service
import ChorusNode
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

extension Node {
    /// Serves this node's local HTTP API (Specs/api.md) from this process, as
    /// `chorus serve` does: on `socketPath` (default: `api.sock` in the store
    /// directory, owner-only) and, with `tcp`, on a TCP address where every
    /// request needs `token`. Every REST endpoint (each a typed operation),
    /// live queries, the page and `/health` work; `/metrics` is served when
    /// `metrics` is given. `/v1/run`, the `chorus` command line of a served
    /// store, needs `commandLine` (`ChorusProgram.runner(node:)` from
    /// ChorusCommands). Runs until `shutdown()`.
    public nonisolated func serveAPI(
        socketPath: String? = nil, tcp: (host: String, port: Int)? = nil, token: String? = nil, metrics: ServiceMetrics? = nil,
        logger: Logger = Logger(label: "chorus.api", factory: { _ in SwiftLogNoOpLogHandler() }), commandLine: CommandRunner? = nil
    ) async throws -> APIServing {
        var configuration = APIConfiguration(socketPath: socketPath ?? APIPaths.socket(inStore: storePath))
        configuration.tcp = tcp
        configuration.token = token
        let expected = tcp == nil ? 1 : 2
        let (listening, continuation) = AsyncStream.makeStream(of: APIEndpoint.self)
        let server = APIServer(
            node: self, configuration: configuration, logger: logger, metrics: metrics, runCommand: commandLine,
            onListening: { continuation.yield($0) })
        let group = ServiceGroup(configuration: .init(services: try server.services(), logger: logger))
        let task = Task {
            do { try await group.run() } catch { logger.error("the local API stopped: \(error)") }
            continuation.finish()
        }
        var endpoints: [APIEndpoint] = []
        for await endpoint in listening {
            endpoints.append(endpoint)
            if endpoints.count == expected { break }
        }
        guard endpoints.count == expected else {
            await task.value
            throw APIServerError.notListening(configuration.socketPath)
        }
        // The two listeners start concurrently: report the socket first, as documented.
        let ordered = endpoints.filter { if case .unixSocket = $0 { true } else { false } } + endpoints.filter { if case .tcp = $0 { true } else { false } }
        return APIServing(endpoints: ordered, group: group, task: task)
    }
}

/// A node's local API served from this process (`Node.serveAPI`).
public struct APIServing: Sendable {
    /// Where it listens: the Unix socket, then the TCP address (its real port) when asked for.
    public let endpoints: [APIEndpoint]
    let group: ServiceGroup
    let task: Task<Void, Never>

    /// Stops accepting, lets running requests finish (live queries end) and returns when it has stopped.
    public func shutdown() async {
        await group.triggerGracefulShutdown()
        await task.value
        for case .unixSocket(let path) in endpoints { try? FileManager.default.removeItem(atPath: path) }
    }
}
#endif
