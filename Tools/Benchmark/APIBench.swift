// `chorus-bench api`: what the local API costs: a mutation through the API
// against the same mutation made directly on an open node, and queries per
// second through the API with their latency.
import ArgumentParser
import ChorusCommands
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusService
import Dispatch
import Foundation
import Synchronization

struct APIBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "The local API's cost: a mutation through it against a direct one, and queries per second through it.",
        discussion: """
            Makes M follows (of distinct users) one at a time, alternately directly on an open node (the \
            baseline: one durable commit each) and through `POST /v1/following/USER` on the Unix socket of a \
            `chorus serve` child (the same durable commit, plus HTTP, the typed operation and JSON), and reports \
            p50/p99 of each and the API's p99 overhead (target at most 0.5 ms). Then C concurrent clients each send Q \
            `GET /v1/profile` requests: requests per second (target at least 1,000) and p99 (target 5 ms). \
            Clients keep their connection open between requests, as browsers do; the cost of a new \
            connection per request is shown apart (`GET /health` both ways). \
            Needs the `chorus` executable next to chorus-bench (Tools/bench builds both).
            """)
    @Option(help: "Mutations each way.") var mutations = 500
    @Option(help: "Concurrent query clients.") var clients = 2
    @Option(help: "Queries per client.") var queries = 500
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if mutations < 10 || clients < 1 || queries < 10 { throw ValidationError("mutations ≥ 10, clients ≥ 1, queries ≥ 10") }
    }

    func run() async throws {
        let chorus = try siblingExecutable("chorus")
        let dir = temporaryDirectory("api")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let direct = try await Node.create(at: dir + "/direct")
        let served = try await Node.create(at: dir + "/served")
        await served.close()

        // Follows of distinct users: each touches a new object, so the
        // figure is the API's cost, not the fold's of an ever longer history.
        let users = (0..<mutations).map { _ in UserID(SigningKey.generate().publicKey) }
        // Where an API request's time goes, without HTTP: the same query read
        // directly, and run as a command line in this process.
        Bench.note("in-process command lines...")
        var readSamples: [Double] = []
        var commandSamples: [Double] = []
        let runner = ChorusProgram.runner(node: direct)
        let request = CommandRequest(arguments: ["query", "profile", "--json"], workingDirectory: dir)
        for _ in 0..<mutations {
            var start = Bench.clock()
            _ = try direct.projections.profile(direct.identity.user)
            readSamples.append(Bench.clock() - start)
            start = Bench.clock()
            let status = await runner(request, { _ in }, { _ in })
            commandSamples.append(Bench.clock() - start)
            guard status == 0 else { throw ValidationError("query profile exited \(status)") }
        }
        // The same mutation in this process, without HTTP or another process:
        // as the typed operation the endpoint runs, with its JSON, and as a
        // command line (`follow USER --json`, parsed, what `/v1/run` runs).
        Bench.note("in-process mutations...")
        var mutationCommandSamples: [Double] = []
        var parsedMutationSamples: [Double] = []
        for _ in 0..<mutations {
            for parsed in [false, true] {
                let user = SigningKey.generate().publicKey
                let start = Bench.clock()
                if parsed {
                    let status = await runner(CommandRequest(arguments: ["follow", user.hex, "--json"], workingDirectory: dir), { _ in }, { _ in })
                    parsedMutationSamples.append(Bench.clock() - start)
                    guard status == 0 else { throw ValidationError("follow exited \(status)") }
                } else {
                    let report = try await Relate(.follow, user).run(on: direct)
                    _ = try JSONValueEncoder().encode(report).rendered()
                    mutationCommandSamples.append(Bench.clock() - start)
                }
            }
        }

        let server = Process()
        server.executableURL = URL(fileURLWithPath: chorus)
        server.arguments = ["serve", "--store", dir + "/served", "--listen", "127.0.0.1:0", "--log-level", "warning"]
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let client = APIClient(.socket(inStore: dir + "/served"))
        var up = false
        for _ in 0..<300 where !up {
            up = (try? await client.send(.GET, "/health"))?.status == 200
            if !up { try await Task.sleep(for: .milliseconds(20)) }
        }
        guard up else { throw ValidationError("chorus serve did not start") }

        // A client keeps its connection open between requests, as a browser does.
        Bench.note("mutations through the API...")
        var directSamples: [Double] = []
        var apiSamples: [Double] = []
        var healthSamples: [Double] = []
        var freshSamples: [Double] = []
        let mutations = self.mutations
        try await client.withConnection { connection in
            // Alternately, so that both see the same moments of the machine's load.
            for user in users {
                var start = Bench.clock()
                _ = try await direct.follow(user)
                directSamples.append(Bench.clock() - start)
                start = Bench.clock()
                let r = try await connection.send(.POST, "/v1/following/\(user.hex)")
                apiSamples.append(Bench.clock() - start)
                guard r.status == 200 else { throw ValidationError("POST /v1/following answered \(r.status): \(r.text)") }
            }
            for _ in 0..<mutations {
                let start = Bench.clock()
                _ = try await connection.send(.GET, "/health")
                healthSamples.append(Bench.clock() - start)
            }
        }
        // The same request on a new connection each time (a one-shot `curl`).
        for _ in 0..<mutations {
            let start = Bench.clock()
            _ = try await client.send(.GET, "/health")
            freshSamples.append(Bench.clock() - start)
        }

        Bench.note("queries through the API...")
        let queries = self.queries
        let start = Bench.clock()
        let querySamples = try await withThrowingTaskGroup(of: [Double].self) { group in
            for _ in 0..<clients {
                group.addTask {
                    try await client.withConnection { connection in
                        var out: [Double] = []
                        for _ in 0..<queries {
                            let t = Bench.clock()
                            let r = try await connection.send(.GET, "/v1/profile")
                            out.append(Bench.clock() - t)
                            guard r.status == 200 else { throw ValidationError("GET /v1/profile answered \(r.status)") }
                        }
                        return out
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let elapsed = Bench.clock() - start
        await direct.close()
        let rate = Double(querySamples.count) / elapsed

        let d = percentiles(directSamples)
        let a = percentiles(apiSamples)
        let q = percentiles(querySamples)
        let overhead = (p50: a.p50 - d.p50, p99: a.p99 - d.p99)
        let read = percentiles(readSamples)
        let command = percentiles(commandSamples)
        let mutationCommand = percentiles(mutationCommandSamples)
        let parsedMutation = percentiles(parsedMutationSamples)
        let health = percentiles(healthSamples)
        let fresh = percentiles(freshSamples)
        if json {
            let object: [String: Any] = [
                "direct_mutation_ms": ["p50": d.p50, "p99": d.p99], "api_mutation_ms": ["p50": a.p50, "p99": a.p99],
                "api_overhead_ms": ["p50": overhead.p50, "p99": overhead.p99],
                "queries": ["clients": clients, "per_second": rate, "p50_ms": q.p50, "p99_ms": q.p99],
                "profile_read_ms": ["p50": read.p50, "p99": read.p99], "command_line_ms": ["p50": command.p50, "p99": command.p99],
                "mutation_operation_ms": ["p50": mutationCommand.p50, "p99": mutationCommand.p99],
                "parsed_mutation_command_line_ms": ["p50": parsedMutation.p50, "p99": parsedMutation.p99],
                "health_request_ms": ["p50": health.p50, "p99": health.p99], "health_new_connection_ms": ["p50": fresh.p50, "p99": fresh.p99],
            ]
            print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self))
            return
        }
        func f(_ x: Double) -> String { String(format: "%.3f", x) }
        print("one follow, acknowledged durable (\(mutations) each):")
        print("  directly on an open node      p50 \(f(d.p50)) ms   p99 \(f(d.p99)) ms")
        print("  POST /v1/following/USER (Unix socket, kept-alive) p50 \(f(a.p50)) ms   p99 \(f(a.p99)) ms")
        print("  API overhead                   p50 \(f(overhead.p50)) ms   p99 \(f(overhead.p99)) ms   (target p99 ≤ 0.5 ms)")
        print("  the operation Relate(.follow) with its JSON, in-process  p50 \(f(mutationCommand.p50)) ms   p99 \(f(mutationCommand.p99)) ms")
        print("  `follow USER --json`, in-process, parsed          p50 \(f(parsedMutation.p50)) ms   p99 \(f(parsedMutation.p99)) ms")
        print("where a request's time goes (one at a time):")
        print("  profile read on the node       p50 \(f(read.p50)) ms   p99 \(f(read.p99)) ms")
        print("  `query profile --json`, in-process command line   p50 \(f(command.p50)) ms   p99 \(f(command.p99)) ms")
        print("  GET /health (HTTP on the socket, no command)      p50 \(f(health.p50)) ms   p99 \(f(health.p99)) ms")
        print("  GET /health on a new connection each time         p50 \(f(fresh.p50)) ms   p99 \(f(fresh.p99)) ms")
        print("GET /v1/profile, \(clients) concurrent clients × \(queries):")
        print("  \(Int(rate)) requests/s   p50 \(f(q.p50)) ms   p99 \(f(q.p99)) ms   (target ≥ 1,000/s with p99 ≤ 5 ms)")
    }
}
