import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusNode
import ChorusSync
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import ChorusService

// MARK: serve

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve sync to peers over encrypted TCP until SIGINT or SIGTERM.",
        discussion: """
            Peers must hold this store's network key (network.json, or the file given with \
            --network-key, which overrides it for this server). Logs one line per \
            session start, end or error to stderr. A peer that breaks the protocol is \
            disconnected and refused for ten minutes. On SIGINT/SIGTERM the server stops \
            accepting, ends running sessions and closes the store; every acknowledged \
            event is already durable.
            """)

    @OptionGroup var store: StoreOptions
    @Option(help: ArgumentHelp("Address to listen on (port 0 picks a free port).", valueName: "host:port"))
    var listen = "127.0.0.1:7800"
    @Option(
        help: ArgumentHelp(
            "A file holding the network key (64 hex digits) to use instead of the store's network.json key.",
            valueName: "file"))
    var networkKey: String?
    @Option(help: "Most connections open at once (default: half the file-descriptor limit, at most 4096).")
    var maxConnections: Int?
    @Option(help: "Most connections still in their handshake; the oldest is dropped for a new one.")
    var maxUnauthenticated = 128
    @Option(help: "Most authenticated connections from one address.")
    var maxPerAddress = 64
    @Option(
        help: ArgumentHelp(
            "Also serve the local API on this TCP address (every request needs the bearer token in keys/api.token).",
            valueName: "host:port"))
    var apiListen: String?
    @Option(help: "Most events served to one peer in one session; the peer syncs again for the rest.")
    var maxEventsPerSession = SessionBudget().events
    @Option(help: "Most bytes of events served to one peer in one session.")
    var maxBytesPerSession = SessionBudget().bytes

    func validate() throws {
        guard SyncNetwork.parseAddress(listen) != nil else { throw ValidationError("--listen must be HOST:PORT, got \"\(listen)\"") }
        if let apiListen, SyncNetwork.parseAddress(apiListen) == nil {
            throw ValidationError("--api-listen must be HOST:PORT, got \"\(apiListen)\"")
        }
        if let maxConnections, maxConnections < 1 { throw ValidationError("--max-connections must be at least 1") }
        if maxUnauthenticated < 1 || maxPerAddress < 1 {
            throw ValidationError("--max-unauthenticated and --max-per-address must be at least 1")
        }
        if maxEventsPerSession < 1 || maxBytesPerSession < 1 {
            throw ValidationError("--max-events-per-session and --max-bytes-per-session must be at least 1")
        }
        if let networkKey {
            do { _ = try SyncNetwork.readNetworkKey(path: networkKey) } catch let e as SyncError {
                if case .local(let why) = e { throw ValidationError("--network-key: \(why)") }
                throw ValidationError("--network-key: \(e)")
            }
        }
    }

    func run() async throws {
        guard let (host, port) = SyncNetwork.parseAddress(listen) else { throw ExitCode(Exit.failure) }
        let apiAddress = apiListen.flatMap(SyncNetwork.parseAddress)
        let key = try networkKey.map { try SyncNetwork.readNetworkKey(path: $0) }
        let node = try await store.open()
        var options = SyncOptions(live: true)
        options.budget = SessionBudget(events: maxEventsPerSession, bytes: maxBytesPerSession)
        let server = try SyncServer(node: node, options: options, log: { printError("chorus serve: " + $0) })
        let listener: SecureListener
        let limits = ConnectionLimits(
            total: maxConnections, unauthenticated: maxUnauthenticated, unauthenticatedPerAddress: maxUnauthenticated,
            perAddress: maxPerAddress)
        let services: [any Service]
        do {
            listener = try await server.listen(host: host, port: port, networkKey: key, limits: limits)
            var api = APIConfiguration(socketPath: APIPaths.socket(inStore: store.path))
            if let apiAddress {
                api.tcp = (apiAddress.host, apiAddress.port)
                api.token = try APIToken.loadOrCreate(at: APIPaths.token(inStore: store.path))
            }
            var logger = Logger(label: "chorus.api")
            logger.logLevel = .warning
            let apiServer = APIServer(
                node: node, configuration: api, logger: logger, runCommand: Forwarding.runner(node: node),
                onListening: { endpoint in
                    if case .tcp = endpoint { printError("chorus serve: local API on \(endpoint) (bearer token in \(APIPaths.token(inStore: store.path)))") }
                })
            services = [SyncListenerService(listener: listener, server: server)] + (try apiServer.services())
        } catch {
            await node.close()
            throw error
        }
        printError("chorus serve: listening on \(host):\(listener.port) as device \(node.identity.device.hex)")
        printError("chorus serve: local API on \(APIPaths.socket(inStore: store.path))")
        var groupLogger = Logger(label: "chorus.serve")
        groupLogger.logLevel = .warning
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: groupLogger))
        var failure: (any Error)?
        do { try await group.run() } catch { failure = error }
        printError("chorus serve: shutting down")
        await listener.shutdown()
        await server.shutdown()
        try? FileManager.default.removeItem(atPath: APIPaths.socket(inStore: store.path))
        await node.close()
        printError("chorus serve: stopped")
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

/// Suspends until SIGINT or SIGTERM arrives.
func waitForTermination() async {
    let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
    var sources: [any DispatchSourceSignal] = []
    for sig in [SIGINT, SIGTERM] {
        signal(sig, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler { continuation.yield(sig) }
        source.resume()
        sources.append(source)
    }
    for await _ in stream { break }
    for s in sources { s.cancel() }
}

// MARK: sync

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sync both ways with one peer over encrypted TCP.",
        discussion: """
            Without --live, exits 0 once both sides said the sync is complete, printing \
            events and blobs received and sent, bytes on the wire and seconds. With --live \
            the connection stays open and new events flow both ways until SIGINT/SIGTERM \
            or the peer closes. --hops N replicates only the user's own devices (0), the \
            users followed (1), their follows (2)..., plus issuers and chat members, never \
            blocked users.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: ArgumentHelp("The peer's address.", valueName: "host:port")) var address: String
    @Flag(help: "Stay connected and exchange new events as they are appended.") var live = false
    @Option(help: "Replicate only feeds within N follow hops of this user.") var hops: Int?

    func validate() throws {
        guard SyncNetwork.parseAddress(address) != nil else { throw ValidationError("the address must be HOST:PORT, got \"\(address)\"") }
        if let hops, hops < 0 { throw ValidationError("--hops must be 0 or more") }
    }

    func run() async throws {
        guard let (host, port) = SyncNetwork.parseAddress(address) else { throw ExitCode(Exit.failure) }
        var options = SyncOptions(live: live, scope: ReplicationScope(hops: hops))
        let json = output.json
        // On a terminal only (ProgressBar checks), after the first half second.
        let bar = ProgressBar()
        options.onProgress = { p in
            if p.blobsRequested > p.blobsReceived, p.eventsReceived >= p.eventsRequested {
                bar.update("sync: pictures", p.blobsReceived, p.blobsRequested)
            } else {
                bar.update("sync: events", p.eventsReceived, p.eventsRequested)
            }
        }
        if live {
            options.onComplete = { report in
                bar.finish()
                printError("chorus sync: initial sync complete; staying connected (Ctrl-C to stop)")
                printReport(report, json: json)
            }
        }
        let opts = options
        let result: Result<SyncReport, any Error> = try await withNode(store) { node in
            let task = Task { () -> Result<SyncReport, any Error> in
                do { return .success(try await SyncNetwork.sync(node, host: host, port: port, options: opts)) } catch {
                    return .failure(error)
                }
            }
            if live {
                let stopper = Task {
                    await waitForTermination()
                    task.cancel()
                }
                let r = await task.value
                stopper.cancel()
                return r
            }
            return await task.value
        }
        bar.finish()
        switch result {
        case .success(let report):
            if !live { printReport(report, json: json) }
        case .failure(let error):
            if live, Task.isCancelled { return }
            if let e = error as? SyncError {
                printError("error: sync with \(address) failed [\(e.code)]: \(e)")
            } else {
                printError("error: sync with \(address) failed: \(error)")
            }
            throw ExitCode(Exit.failure)
        }
    }
}

func printReport(_ r: SyncReport, json: Bool) {
    if json {
        printJSON(
            .object([
                ("peer", .string(r.peer.key.hex)), ("address", .string(r.peer.address)),
                ("complete", .bool(r.complete)), ("live", .bool(r.live)),
                ("events_received", .uint(UInt64(r.eventsReceived))), ("events_sent", .uint(UInt64(r.eventsSent))),
                ("duplicates_received", .uint(UInt64(r.duplicatesReceived))),
                ("blobs_received", .uint(UInt64(r.blobsReceived))), ("blobs_sent", .uint(UInt64(r.blobsSent))),
                ("forks_seen", .uint(UInt64(r.forksSeen))), ("chat_keys_shared", .uint(UInt64(r.keyEventsWritten))),
                ("bytes_received", .uint(UInt64(r.bytesReceived))), ("bytes_sent", .uint(UInt64(r.bytesSent))),
                ("frames_received", .uint(UInt64(r.framesReceived))), ("frames_sent", .uint(UInt64(r.framesSent))),
                ("sessions", .uint(UInt64(r.sessions))), ("reconciled", .bool(r.reconciled)), ("partial", .bool(r.partial)),
                ("seconds", .string(String(format: "%.3f", r.seconds))),
            ]))
    } else {
        emit(
            """
            Synced with \(r.peer.key.short) (\(r.peer.address)) in \(String(format: "%.3f", r.seconds)) s
              received: \(r.eventsReceived) events, \(r.blobsReceived) blobs
              sent:     \(r.eventsSent) events, \(r.blobsSent) blobs
              wire:     \(r.bytesReceived) bytes in, \(r.bytesSent) bytes out (\(r.framesReceived + r.framesSent) frames)
            """)
        if r.keyEventsWritten > 0 {
            emit("  keys:     wrote \(r.keyEventsWritten) chat.key events for member devices that lacked a chat key")
        }
        if r.sessions > 1 { emit("  sessions: \(r.sessions) (the peer serves a budget of events per session)") }
        if r.partial {
            emit("  partial:  the peer sent less than was asked (events stamped ahead of this node's clock, or its budget); sync again later for the rest")
        }
    }
}

// MARK: peers

struct Peers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List known sync peers and when each last synced.")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let records: [PeerRecord] = try await withNode(store, readOnly: true) { node in
            // A store that never synced has no peers database yet.
            (try? PeerStore(env: node.log.env).all()) ?? []
        }
        let sorted = records.sorted { $0.lastSynced > $1.lastSynced }
        if output.json {
            printJSON(
                .array(sorted.map { r in
                    .object([
                        ("peer", .string(r.key.hex)), ("user", r.user.map { .string($0.hex) } ?? .null),
                        ("address", .string(r.address)), ("last_synced_ms", .uint(r.lastSynced)),
                        ("last_synced", .string(iso(r.lastSynced))), ("sessions", .uint(r.sessions)),
                        ("events_received", .uint(r.eventsReceived)), ("events_sent", .uint(r.eventsSent)),
                        ("position", .uint(r.position)),
                    ])
                }))
            return
        }
        if sorted.isEmpty {
            emit("No known peers yet: run `chorus sync HOST:PORT` or let peers connect to `chorus serve`.")
            return
        }
        emit(
            table(
                sorted.map { [$0.key.short, $0.address, iso($0.lastSynced), "\($0.sessions)", "\($0.eventsReceived)", "\($0.eventsSent)"] },
                header: ["PEER", "ADDRESS", "LAST SYNCED", "SESSIONS", "RECEIVED", "SENT"]))
    }
}

func iso(_ millis: UInt64) -> String {
    guard millis > 0 else { return "never" }
    let f = ISO8601DateFormatter()
    return f.string(from: Date(timeIntervalSince1970: Double(millis) / 1000))
}
