#if Service
import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusNode
import ChorusService
import ChorusSync
import Foundation
import Logging
import Metrics
import ServiceLifecycle

/// `chorus serve`: sync for peers, the local API, logs, metrics, graceful
/// shutdown (Specs/api.md).
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve sync to peers and the local API until SIGINT or SIGTERM.",
        discussion: """
            Peers must hold this store's network key (network.json, or the file given with \
            --network-key, which overrides it for this server). While it runs, other chorus \
            commands on this store run inside it through the local API (api.sock in the \
            store; also TCP with --api-listen, bearer token in keys/api.token), which serves \
            /metrics (Prometheus), /health and a viewer page at /. Logs one line per session \
            start, end or error to stderr (--log-format json for one JSON object per line); \
            connections that fail before authentication are logged at most 10 times per 10 s, \
            with a count of the rest. A peer that breaks the protocol is disconnected and \
            refused for ten minutes. --config FILE reads these options from a JSON object \
            whose keys are the long option names ("listen", "api-listen", "max-connections", \
            …); options given on the command line override it. On SIGINT/SIGTERM the server \
            stops accepting, ends running sessions and requests and closes the store; every \
            acknowledged event is already durable.
            """)

    @OptionGroup var store: StoreOptions
    @Option(help: ArgumentHelp("A JSON file of serve options (the command line overrides it).", valueName: "file"))
    var config: String?
    @Option(help: ArgumentHelp("Address to listen on for peers (default 127.0.0.1:7800; port 0 picks a free port).", valueName: "host:port"))
    var listen: String?
    @Option(
        help: ArgumentHelp(
            "A file holding the network key (64 hex digits) to use instead of the store's network.json key.",
            valueName: "file"))
    var networkKey: String?
    @Option(help: "Most connections open at once (default: half the file-descriptor limit, at most 4096).")
    var maxConnections: Int?
    @Option(help: "Most connections still in their handshake; the oldest is dropped for a new one (default 128).")
    var maxUnauthenticated: Int?
    @Option(help: "Most authenticated connections from one address (default: no cap but --max-connections, since many peers may share one address behind a NAT).")
    var maxPerAddress: Int?
    @Option(help: "Most events served to one peer in one session; the peer syncs again for the rest (default 1000000).")
    var maxEventsPerSession: Int?
    @Option(help: "Most bytes of events served to one peer in one session (default 1073741824).")
    var maxBytesPerSession: Int?
    @Option(
        help: ArgumentHelp(
            "Also serve the local API on this TCP address (every request needs the bearer token in keys/api.token).",
            valueName: "host:port"))
    var apiListen: String?
    @Option(
        help: ArgumentHelp(
            "A host name the TCP API answers to besides localhost, the loopback addresses and the --api-listen host (repeatable). Requests naming any other Host are refused (DNS rebinding).",
            valueName: "name"))
    var apiHost: [String] = []
    @Option(
        help: ArgumentHelp(
            "all: keep and serve every feed peers offer. listed: keep only the feeds of users whose relay list names this relay home, every user key's bindings and relay lists, and what is addressed to users whose list names it inbox (default all).",
            valueName: "all|listed"))
    var host: String?
    @Option(
        help: ArgumentHelp(
            "Exchange the directory (every user's bindings and relay list) with each of the network's bootstrap relays this often, so this relay can answer where any user lives; 0: never (default 60).",
            valueName: "seconds"))
    var directoryInterval: Int?
    @Option(help: ArgumentHelp("text or json (default text).", valueName: "format"))
    var logFormat: String?
    @Option(help: ArgumentHelp("trace, debug, info, notice, warning, error or critical (default info).", valueName: "level"))
    var logLevel: String?

    /// The options after the config file and the command line are merged.
    struct Settings: Codable, Equatable {
        var listen: String?
        var networkKey: String?
        var maxConnections: Int?
        var maxUnauthenticated: Int?
        var maxPerAddress: Int?
        var maxEventsPerSession: Int?
        var maxBytesPerSession: Int?
        var apiListen: String?
        var apiHost: [String]?
        var host: String?
        var directoryInterval: Int?
        var logFormat: String?
        var logLevel: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case listen, networkKey = "network-key", maxConnections = "max-connections", maxUnauthenticated = "max-unauthenticated"
            case maxPerAddress = "max-per-address", maxEventsPerSession = "max-events-per-session"
            case maxBytesPerSession = "max-bytes-per-session", apiListen = "api-listen", apiHost = "api-host", logFormat = "log-format"
            case logLevel = "log-level", host, directoryInterval = "directory-interval"
        }

        /// Reads a config file; an unknown key is an error (a typo must not be silently ignored).
        static func load(_ path: String) throws -> Settings {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ValidationError("--config: cannot read \(path)")
            }
            guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw ValidationError("--config: \(path) is not a JSON object")
            }
            let known = Set(CodingKeys.allCases.map(\.rawValue))
            if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
                throw ValidationError("--config: \(path) has an unknown option \"\(unknown)\"; the options are \(known.sorted().joined(separator: ", "))")
            }
            do { return try JSONDecoder().decode(Settings.self, from: data) } catch {
                throw ValidationError("--config: \(path): a value has the wrong type (strings for addresses, files and formats, whole numbers for limits): \(error)")
            }
        }
    }

    func settings() throws -> Settings {
        var s = try config.map { try Settings.load(Console.path($0)) } ?? Settings()
        s.listen = listen ?? s.listen
        s.networkKey = networkKey ?? s.networkKey
        s.maxConnections = maxConnections ?? s.maxConnections
        s.maxUnauthenticated = maxUnauthenticated ?? s.maxUnauthenticated
        s.maxPerAddress = maxPerAddress ?? s.maxPerAddress
        s.maxEventsPerSession = maxEventsPerSession ?? s.maxEventsPerSession
        s.maxBytesPerSession = maxBytesPerSession ?? s.maxBytesPerSession
        s.apiListen = apiListen ?? s.apiListen
        if !apiHost.isEmpty { s.apiHost = apiHost }
        s.host = host ?? s.host
        s.directoryInterval = directoryInterval ?? s.directoryInterval
        s.logFormat = logFormat ?? s.logFormat
        s.logLevel = logLevel ?? s.logLevel
        return s
    }

    func validate() throws { _ = try Resolved(try settings()) }

    /// Settings with defaults applied and every value checked.
    struct Resolved {
        let host: String
        let port: Int
        let api: (host: String, port: Int)?
        let apiHosts: [String]
        let networkKey: Bytes32?
        let limits: ConnectionLimits
        let budget: SessionBudget
        let logFormat: LineLogHandler.Format
        let logLevel: Logger.Level
        /// `--host listed` (Specs/sync.md §8.1).
        let hostsListed: Bool
        /// `--directory-interval` (Specs/sync.md §4.12); nil: never.
        let directoryInterval: Duration?

        init(_ s: Settings) throws {
            switch s.host ?? "all" {
            case "all": hostsListed = false
            case "listed": hostsListed = true
            case let other: throw ValidationError("--host must be all or listed, got \"\(other)\"")
            }
            let interval = s.directoryInterval ?? 60
            if interval < 0 { throw ValidationError("--directory-interval must be 0 (never) or a number of seconds, got \(interval)") }
            directoryInterval = interval == 0 ? nil : .seconds(interval)
            let listen = s.listen ?? "127.0.0.1:7800"
            guard let address = SyncNetwork.parseAddress(listen) else { throw ValidationError("--listen must be HOST:PORT, got \"\(listen)\"") }
            (host, port) = address
            if let apiListen = s.apiListen {
                guard let api = SyncNetwork.parseAddress(apiListen) else { throw ValidationError("--api-listen must be HOST:PORT, got \"\(apiListen)\"") }
                self.api = api
            } else {
                api = nil
            }
            apiHosts = s.apiHost ?? []
            if let bad = apiHosts.first(where: { $0.isEmpty || $0.contains(where: { " /:@".contains($0) }) }) {
                throw ValidationError("--api-host takes a host name without a port, got \"\(bad)\"")
            }
            if let n = s.maxConnections, n < 1 { throw ValidationError("--max-connections must be at least 1") }
            let unauthenticated = s.maxUnauthenticated ?? 128
            if unauthenticated < 1 || (s.maxPerAddress ?? 1) < 1 {
                throw ValidationError("--max-unauthenticated and --max-per-address must be at least 1")
            }
            limits = ConnectionLimits(
                total: s.maxConnections, unauthenticated: unauthenticated, unauthenticatedPerAddress: unauthenticated,
                perAddress: s.maxPerAddress)
            let events = s.maxEventsPerSession ?? SessionBudget().events
            let bytes = s.maxBytesPerSession ?? SessionBudget().bytes
            if events < 1 || bytes < 1 { throw ValidationError("--max-events-per-session and --max-bytes-per-session must be at least 1") }
            budget = SessionBudget(events: events, bytes: bytes)
            guard let format = LineLogHandler.Format(rawValue: s.logFormat ?? "text") else {
                throw ValidationError("--log-format must be text or json, got \"\(s.logFormat ?? "")\"")
            }
            logFormat = format
            guard let level = Logger.Level(rawValue: s.logLevel ?? "info") else {
                throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), got \"\(s.logLevel ?? "")\"")
            }
            logLevel = level
            if let file = s.networkKey {
                do { networkKey = try SyncNetwork.readNetworkKey(path: Console.path(file)) } catch let e as SyncError {
                    if case .local(let why) = e { throw ValidationError("--network-key: \(why)") }
                    throw ValidationError("--network-key: \(e)")
                }
            } else {
                networkKey = nil
            }
        }
    }

    func run() async throws {
        // Before the limits' defaults are read from it.
        Descriptors.raiseLimit()
        let settings = try Resolved(try settings())
        // Both once per process, before anything logs or counts.
        LoggingSystem.bootstrap { label in LineLogHandler(label: label, format: settings.logFormat, level: settings.logLevel) }
        let metrics = ServiceMetrics.bootstrap()
        let logger = Logger(label: "chorus.serve")
        let (limits, lowered) = settings.limits.fittedToDescriptors()
        for line in lowered { logger.warning("\(line)") }

        // A store opened after an upgrade may first fold its whole log again
        // (minutes at millions of events): say why before it starts.
        let node = try await store.open(onRebuild: { why, events in
            logger.notice(
                "rebuilding the projections from the log before serving: they \(why)",
                metadata: ["store": "\(store.path)", "events": "\(events)"])
        })
        var options = SyncOptions.relay(hostsListed: settings.hostsListed)
        options.budget = settings.budget
        let server = try SyncServer(node: node, options: options, logger: Logger(label: "chorus.sync"))
        let listener: SecureListener
        let services: [any Service]
        let socket = APIPaths.socket(inStore: store.path)
        do {
            listener = try await server.listen(host: settings.host, port: settings.port, networkKey: settings.networkKey, limits: limits)
            var api = APIConfiguration(socketPath: socket)
            if let address = settings.api {
                api.tcp = address
                let tokenPath = APIPaths.token(inStore: store.path)
                api.tokenPath = tokenPath
                api.token = try APIToken.loadOrCreate(at: tokenPath)
                api.hostNames = settings.apiHosts
            }
            // Hummingbird's own lines (one per listener start) stay below notice.
            var apiLogger = Logger(label: "chorus.api")
            apiLogger.logLevel = max(settings.logLevel, .notice)
            let tokenPath = APIPaths.token(inStore: store.path)
            let apiServer = APIServer(
                node: node, configuration: api, logger: apiLogger, metrics: metrics, runCommand: Forwarding.runner(node: node),
                onListening: { endpoint in
                    switch endpoint {
                    case .tcp: logger.notice("local API on \(endpoint)", metadata: ["token_file": "\(tokenPath)"])
                    case .unixSocket: logger.notice("local API on \(socket)")
                    }
                })
            services =
                [SyncListenerService(listener: listener, server: server)] + (try apiServer.services())
                + (settings.hostsListed ? [HostingCensusService(node: node, logger: logger)] : [])
                + (settings.directoryInterval.map { [DirectoryService(node: node, hostsListed: settings.hostsListed, interval: $0, logger: logger)] } ?? [])
        } catch {
            await node.close()
            throw error
        }
        logger.notice(
            "listening on \(settings.host):\(listener.port)",
            metadata: ["device": "\(node.identity.device.hex)", "host": "\(settings.hostsListed ? "listed" : "all")"])
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: Logger(label: "chorus.lifecycle")))
        var failure: (any Error)?
        do { try await group.run() } catch { failure = error }
        logger.notice("shutting down")
        await listener.shutdown()
        await server.shutdown()
        try? FileManager.default.removeItem(atPath: socket)
        await node.close()
        logger.notice("stopped")
        if let failure { throw failure }
    }
}

/// The sync listener as a service: it serves until the group shuts down.
struct SyncListenerService: Service {
    let listener: SecureListener
    let server: SyncServer

    func run() async throws {
        try? await gracefulShutdown()
        await listener.shutdown()
        await server.shutdown()
    }
}

/// The directory exchange (Specs/sync.md §4.12) with each bootstrap relay
/// of the network, at start and then every `interval`: a relay so holds
/// every user's relay list, and a user's node finds the lists of the users
/// it follows at its own relays. One log line per failed exchange; counters
/// of exchanges by outcome.
struct DirectoryService: Service {
    let node: Node
    let hostsListed: Bool
    let interval: Duration
    let logger: Logger
    static let succeeded = Counter(label: "chorus_directory_exchanges_total", dimensions: [("outcome", "ok")])
    static let failed = Counter(label: "chorus_directory_exchanges_total", dimensions: [("outcome", "failed")])
    static let received = Counter(label: "chorus_directory_events_received_total")

    func run() async throws {
        // Cancelled at shutdown, so neither a running exchange nor the wait holds the server up.
        await cancelWhenGracefulShutdown { await exchanges() }
    }

    func exchanges() async {
        while !Task.isCancelled {
            for exchange in await SyncNetwork.exchangeDirectory(node, hostsListed: hostsListed) {
                switch exchange.outcome {
                case .success(let report):
                    Self.succeeded.increment()
                    Self.received.increment(by: report.eventsReceived)
                case .failure(let error):
                    Self.failed.increment()
                    logger.warning(
                        "directory exchange with bootstrap relay \(exchange.relay.address) failed: \(error)",
                        metadata: ["relay": "\(exchange.relay.key.hex)"])
                }
            }
            try? await Task.sleep(for: interval)
        }
    }
}

/// A listed relay's census (Specs/sync.md §8.1) every minute: gauges of the
/// users it hosts, the users it still holds events of although their list
/// dropped it, and its inbox; a log line for each user whose list stops (or
/// starts again) naming it.
struct HostingCensusService: Service {
    let node: Node
    let logger: Logger
    static let hosted = Gauge(label: "chorus_relay_hosted_users")
    static let former = Gauge(label: "chorus_relay_former_users")
    static let formerEvents = Gauge(label: "chorus_relay_former_events")
    static let inbox = Gauge(label: "chorus_relay_inbox_notices")

    func run() async throws {
        // Cancelled at shutdown, so the minute's wait does not hold the server up.
        await cancelWhenGracefulShutdown { await censuses() }
    }

    func censuses() async {
        var known: [PublicKey: UInt64]? = nil
        while !Task.isCancelled {
            if let census = try? HostingCensus.take(at: node) {
                Self.hosted.record(census.hostedUsers)
                Self.former.record(census.formerUsers.count)
                Self.formerEvents.record(census.formerUsers.values.reduce(0, +))
                Self.inbox.record(census.inboxNotices)
                for (user, events) in census.formerUsers.sorted(by: { $0.key < $1.key }) where known?[user] == nil {
                    logger.notice(
                        "user \(user.short) no longer lists this relay as home: holding \(events) events of its devices, accepting no new ones",
                        metadata: ["user": "\(user.hex)", "events": "\(events)"])
                }
                known = census.formerUsers
            }
            try? await Task.sleep(for: .seconds(60))
        }
    }
}
#else
import ArgumentParser
import ChorusCommandLine

/// `chorus serve` in a build without the `Service` trait: the serving
/// process needs the HTTP API and the service life cycle, which that build
/// leaves out, so the command says how to get a build that has them.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve sync to peers and the local API (this build has no service: build with --traits Service).")

    @Argument(parsing: .allUnrecognized) var arguments: [String] = []

    func run() async throws {
        printError("error: this chorus was built without the Service trait, which `serve` needs; build it with `swift build --traits Service` (Tools/chorus does)")
        throw ExitCode(Exit.failure)
    }
}
#endif
