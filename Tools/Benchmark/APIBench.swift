// `chorus-bench api`: what the local API costs: a mutation through the API
// against the same mutation made directly on an open node, and queries per
// second through the API with their latency.
import ArgumentParser
import ChorusCommands
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusOperations
import ChorusService
import Dispatch
import Foundation
import NIOCore
import NIOPosix
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
            connection per request is shown apart (`GET /health` both ways). Last, W watchers (`GET /v1/watch`, \
            server-sent events) of D distinct queries (`/v1/log?latest=true&limit=1&since=0…D-1`, each changed by every \
            commit) see K follows made one at a time: the time from a follow's acknowledgement to each watcher's \
            event with it, p50/p99 (target p99 at most 10 ms for 1,000 watchers of 10 queries). \
            The stores live in memory (/dev/shm, where the machine has it) unless --on-disk: the overhead is then \
            the API's, not the difference of two disks' flush stalls, which on a shared disk make the p99 of durable \
            commits vary by milliseconds from run to run. \
            Needs the `chorus` executable next to chorus-bench (Tools/bench builds both).
            """)
    @Option(help: "Mutations each way.") var mutations = 500
    @Option(help: "Concurrent query clients.") var clients = 2
    @Option(help: "Queries per client.") var queries = 500
    @Option(help: "Watchers of live queries.") var watchers = 1000
    @Option(help: "Distinct queries the watchers watch.") var watchedQueries = 10
    @Option(help: "Commits the watchers see.") var watchedCommits = 30
    @Flag(help: "Keep the stores in the temporary directory, on disk, instead of in memory.") var onDisk = false
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if mutations < 10 || clients < 1 || queries < 10 { throw ValidationError("mutations ≥ 10, clients ≥ 1, queries ≥ 10") }
        if watchers < 1 || watchedQueries < 1 || watchedQueries > watchers || watchedCommits < 1 {
            throw ValidationError("watchers ≥ 1, 1 ≤ watched-queries ≤ watchers, watched-commits ≥ 1")
        }
    }

    func run() async throws {
        let chorus = try siblingExecutable("chorus")
        let inMemory = !onDisk && FileManager.default.isWritableFile(atPath: "/dev/shm")
        let dir = inMemory ? "/dev/shm/chorus-bench-api-\(UUID().uuidString)" : temporaryDirectory("api")
        if inMemory { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let direct = try await Node.create(at: dir + "/direct", network: NetworkConfig())
        let served = try await Node.create(at: dir + "/served", network: NetworkConfig())
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
        let watch = try await watchFigures(client, socket: APIPaths.socket(inStore: dir + "/served"))
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
                "api_overhead_ms": ["p50": overhead.p50, "p99": overhead.p99], "stores_in_memory": inMemory,
                "queries": ["clients": clients, "per_second": rate, "p50_ms": q.p50, "p99_ms": q.p99],
                "profile_read_ms": ["p50": read.p50, "p99": read.p99], "command_line_ms": ["p50": command.p50, "p99": command.p99],
                "mutation_operation_ms": ["p50": mutationCommand.p50, "p99": mutationCommand.p99],
                "parsed_mutation_command_line_ms": ["p50": parsedMutation.p50, "p99": parsedMutation.p99],
                "health_request_ms": ["p50": health.p50, "p99": health.p99], "health_new_connection_ms": ["p50": fresh.p50, "p99": fresh.p99],
                "watch": [
                    "watchers": watchers, "queries": watchedQueries, "commits": watchedCommits, "event_after_ack_p50_ms": watch.p50,
                    "event_after_ack_p99_ms": watch.p99, "event_after_ack_max_ms": watch.max,
                ],
            ]
            print(String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self))
            return
        }
        func f(_ x: Double) -> String { String(format: "%.3f", x) }
        print("one follow, acknowledged durable (\(mutations) each), stores \(inMemory ? "in memory (/dev/shm)" : "on disk"):")
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
        print("\(watchers) watchers of \(watchedQueries) live queries, \(watchedCommits) commits, from a commit's acknowledgement to each watcher's event:")
        print("  p50 \(f(watch.p50)) ms   p99 \(f(watch.p99)) ms   max \(f(watch.max)) ms   (target p99 ≤ 10 ms)")
    }

    /// Whether `needle` occurs in `haystack`, bytewise.
    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Bool {
        guard let head = needle.first, haystack.count >= needle.count else { return false }
        var i = 0
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == head, haystack[i..<i + needle.count].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }

    /// W watchers of D queries that every commit changes; K follows one at
    /// a time, each waited for by every watcher. Milliseconds from a follow's
    /// acknowledgement to each watcher's event holding it (0 when the event
    /// came first).
    func watchFigures(_ client: APIClient, socket: String) async throws -> (p50: Double, p99: Double, max: Double) {
        Bench.note("\(watchers) watchers of \(watchedQueries) queries...")
        let state = WatchState()
        let watchers = self.watchers
        // Distinct queries with the same small answer (the newest event).
        let paths = (0..<watchedQueries).map { "/v1/log?latest=true&limit=1&since=\($0)" }
        // Each watcher is a channel handler on the client's event loops, not
        // a task: the watchers share the machine's 2 cores with the server,
        // and what they cost is not the server's latency.
        var channels: [any Channel] = []
        defer { for channel in channels { channel.close(promise: nil) } }
        for i in 0..<watchers {
            let path = paths[i % paths.count].addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let request = "GET /v1/watch?path=\(path) HTTP/1.1\r\nHost: localhost\r\n\r\n"
            let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(.seconds(5))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(WatchReader(state: state, request: request)) }
                }
            // A Unix socket whose accept queue is full refuses at once: try again.
            var channel: (any Channel)? = nil
            for _ in 0..<500 where channel == nil {
                do {
                    channel = try await bootstrap.connect(unixDomainSocketPath: socket).get()
                } catch {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            guard let channel else { throw ValidationError("watchers: could not connect watcher \(i)") }
            channels.append(channel)
        }
        func waitUntil(_ what: String, _ done: () -> Bool) async throws {
            let deadline = Bench.clock() + 60
            while !done() {
                guard Bench.clock() < deadline else { throw ValidationError("watchers: \(what) did not happen within 60 s") }
                try await Task.sleep(for: .microseconds(200))
            }
        }
        try await waitUntil("every watcher's first event") { state.m.withLock { $0.connected == watchers } }
        try await client.withConnection { connection in
            for _ in 0..<watchedCommits {
                let user = SigningKey.generate().publicKey.hex
                state.m.withLock {
                    $0.seen = 0
                    $0.ack = .infinity
                    $0.target = Array(user.utf8)
                }
                let r = try await connection.send(.POST, "/v1/following/\(user)")
                let ack = Bench.clock()
                guard r.status == 200 else { throw ValidationError("POST /v1/following answered \(r.status)") }
                // Until now `ack` is infinite: an event that came before the acknowledgement counts as 0.
                state.m.withLock { $0.ack = ack }
                try await waitUntil("every watcher's event of a commit") { state.m.withLock { $0.seen == watchers } }
            }
        }
        let samples = state.m.withLock { $0.samples }
        let p = percentiles(samples)
        return (p.p50, p.p99, (samples.max() ?? 0) * 1000)
    }
}

/// What the watchers of `APIBench.watchFigures` share.
final class WatchState: Sendable {
    struct State {
        /// The user key the current commit follows: its events hold it.
        var target: [UInt8] = []
        var seen = 0
        var connected = 0
        var samples: [Double] = []
        var ack = 0.0
    }
    let m = Mutex(State())
}

/// One watcher of `APIBench.watchFigures` on its channel's event loop: sends
/// its request, then notes the time each commit's target first appears in
/// the stream (server-sent events, read as bytes).
final class WatchReader: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let state: WatchState
    let request: String
    /// The bytes received since the last match (bounded): a target can arrive split across reads.
    var buffer: [UInt8] = []
    var connected = false
    var lastTarget: [UInt8] = []

    init(state: WatchState, request: String) {
        self.state = state
        self.request = request
    }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: request)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = Bench.clock()
        buffer.append(contentsOf: unwrapInboundIn(data).readableBytesView)
        if buffer.count > 1 << 16 { buffer.removeFirst(buffer.count - (1 << 15)) }
        // The first event (the query's answer now) ends with an empty line.
        if !connected, APIBench.find(Array("\n\n".utf8), in: buffer) {
            connected = true
            state.m.withLock { $0.connected += 1 }
        }
        let target = state.m.withLock { $0.target }
        if !target.isEmpty, target != lastTarget, APIBench.find(target, in: buffer) {
            lastTarget = target
            buffer.removeAll(keepingCapacity: true)
            state.m.withLock { s in
                s.seen += 1
                s.samples.append(max(0, now - s.ack))
            }
        }
    }
}
