import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusNode
import ChorusOperations
import ChorusSync
import Dispatch
import Foundation

/// Suspends until SIGINT or SIGTERM arrives, or the task is cancelled. A
/// command a server runs for a client waits only for cancellation (the
/// client went away, or the server stops): the signals are the server's.
func waitForTermination() async {
    let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
    var sources: [any DispatchSourceSignal] = []
    if Console.streams == nil {
        sources = SignalSources.catching([SIGINT, SIGTERM]) { continuation.yield($0) }
    }
    await withTaskCancellationHandler {
        for await _ in stream { break }
    } onCancel: {
        continuation.finish()
    }
    for s in sources { s.cancel() }
}

// MARK: sync

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sync both ways over encrypted TCP with one peer, or with the relays that relay lists name.",
        discussion: """
            Without --live, exits 0 once both sides said the sync is complete, printing \
            events and blobs received and sent, bytes on the wire and seconds. With --live \
            the connection stays open and new events flow both ways until SIGINT/SIGTERM \
            or the peer closes. --hops N replicates only the user's own devices (0), the \
            users followed (1), their follows (2)..., plus issuers and chat members, never \
            blocked users.

            Without an address, syncs with relays found from relay lists (`chorus relays`), \
            in parallel (at most --max-relays connections at once); each relay must prove \
            the device key its list names. Those relays are:
              - the user's inbox relays, and their home relays that lack the latest events;
              - the bootstrap relays (`chorus network relay-add`) until they hold the list;
              - the inbox relays of the users the user's events are addressed to;
              - the fewest home relays that cover every user in scope.
            Then the relays named by lists those syncs brought and, for the users of a relay \
            that failed, their other home relays. Exits 0 when every relay's sync completed, \
            2 when any failed (the others still ran).
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: ArgumentHelp("The peer's address (default: the relays of the relay lists).", valueName: "host:port")) var address: String?
    @Flag(help: "Stay connected and exchange new events as they are appended.") var live = false
    @Option(help: "Replicate only feeds within N follow hops of this user.") var hops: Int?
    @Option(help: "Without an address: keep at most N relay connections open at once (default 8).") var maxRelays: Int = 8

    func validate() throws {
        if let address, SyncNetwork.parseAddress(address) == nil { throw ValidationError("the address must be HOST:PORT with a port up to 65535, got \"\(address)\"") }
        if let hops, hops < 0 { throw ValidationError("--hops must be 0 or more") }
        if address == nil, live { throw ValidationError("--live needs the peer's address") }
        if maxRelays < 1 { throw ValidationError("--max-relays must be at least 1") }
    }

    func run() async throws {
        guard let address else { return try await syncRouted() }
        guard let (host, port) = SyncNetwork.parseAddress(address) else { throw ExitCode(Exit.failure) }
        var options = SyncOptions(live: live, scope: ReplicationScope(hops: hops))
        let json = output.json
        // On a terminal only (ProgressBar checks), after the first half second.
        let bar = ProgressBar()
        let progress: @Sendable (SyncProgress) -> Void = { p in
            if p.blobsRequested > p.blobsReceived, p.eventsReceived >= p.eventsRequested {
                bar.update("sync: pictures", p.blobsReceived, p.blobsRequested)
            } else {
                bar.update("sync: events", p.eventsReceived, p.eventsRequested)
            }
        }
        options.onProgress = progress
        guard live else {
            // The same operation `POST /v1/sync` runs.
            let operation = SyncOnce(address: address, hops: hops, onProgress: progress)
            let outcome = try await withNode(store) { node in
                let task = Task { await operation.perform(on: node) }
                return await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
            }
            bar.finish()
            switch outcome {
            case .success(.peer(let report)): printReport(report, json: json)
            case .success(.relays): break
            case .failure(let failure):
                printError("error: sync with \(address) failed [\(failure.code)]: \(failure.message)")
                throw ExitCode(Exit.failure)
            }
            return
        }
        // Live: the initial sync's report, then new events until SIGINT/SIGTERM or the peer closes.
        options.onComplete = { report in
            bar.finish()
            printError("chorus sync: initial sync complete; staying connected (Ctrl-C to stop)")
            printReport(report, json: json)
        }
        let opts = options
        let result: Result<SyncReport, any Error> = try await withNode(store) { node in
            let task = Task { () -> Result<SyncReport, any Error> in
                do { return .success(try await SyncNetwork.sync(node, host: host, port: port, options: opts)) } catch {
                    return .failure(error)
                }
            }
            let stopper = Task {
                await waitForTermination()
                task.cancel()
            }
            let r = await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
            stopper.cancel()
            return r
        }
        bar.finish()
        switch result {
        case .success(let report):
            if report.connectionLost, !Task.isCancelled {
                printError("error: live sync with \(address) ended: the peer went away without closing the connection; sync again when it is back")
                throw ExitCode(Exit.failure)
            }
        case .failure(let error):
            if Task.isCancelled { return }
            if let e = error as? SyncError {
                printError("error: sync with \(address) failed [\(e.code)]: \(e)")
            } else {
                printError("error: sync with \(address) failed: \(error)")
            }
            throw ExitCode(Exit.failure)
        }
    }
}

extension Sync {
    /// `chorus sync` without an address: the relays of the relay lists (Specs/sync.md §9).
    func syncRouted() async throws {
        let operation = SyncOnce(hops: hops, maxRelays: maxRelays)
        let outcome = try await withNode(store) { node in await operation.perform(on: node) }
        guard case .success(.relays(let plan, let results)) = outcome else {
            if case .failure(let failure) = outcome { printError("error: \(failure.message)") }
            throw ExitCode(Exit.failure)
        }
        let failed = results.filter { if case .failure = $0.outcome { true } else { false } }
        if output.json {
            printJSON(relaySyncJSON(plan, results))
        } else {
            for r in results {
                let why = "\(r.relay.reasons.joined(separator: ","))\(r.relay.covers.isEmpty ? "" : ", \(r.relay.covers.count) user\(r.relay.covers.count == 1 ? "" : "s")")"
                switch r.outcome {
                case .success(let report):
                    emit(
                        "\(r.relay.address) (\(why)): received \(report.eventsReceived) events, \(report.blobsReceived) blobs; sent \(report.eventsSent) events, \(report.blobsSent) blobs; \(report.bytesReceived + report.bytesSent) bytes in \(String(format: "%.3f", report.seconds)) s"
                    )
                    if report.deliveriesLeft > 0 || report.noticesReceived > 0 {
                        emit("  inbox: left \(report.deliveriesLeft) addressed events there; received \(report.noticesReceived) notices for this user")
                    }
                case .failure(let error): emit("\(r.relay.address) (\(why)): failed: \(error)")
                }
            }
            if !plan.uncovered.isEmpty {
                emit("\(plan.uncovered.count) users' home relays all failed; their feeds were asked of every other relay of this sync, and their home relays are tried again at the next")
            }
        }
        if !failed.isEmpty { throw ExitCode(Exit.failure) }
    }
}

func printReport(_ r: SyncReport, json: Bool) {
    if json {
        printJSON(syncReportJSON(r))
    } else {
        emit(
            """
            Synced with \(r.peer.key.short) (\(r.peer.address)) in \(String(format: "%.3f", r.seconds)) s
              received: \(r.eventsReceived) events, \(r.blobsReceived) blobs
              sent:     \(r.eventsSent) events, \(r.blobsSent) blobs
              wire:     \(r.bytesReceived) bytes in, \(r.bytesSent) bytes out (\(r.framesReceived + r.framesSent) frames)
            """)
        for hash in r.damagedBlobs {
            emit("  damaged:  blob \(hash.hex) no longer matches its hash in this store; answered as missing. Fetch it again from a peer.")
        }
        if r.keyEventsWritten > 0 {
            emit("  keys:     wrote \(r.keyEventsWritten) chat.key events for member devices that lacked a chat key")
        }
        if let error = r.keySharingError {
            emit(
                "  keys:     could not wrap chat keys for member devices (\(error)); the events are held. "
                    + "Keys are shared again by the next sync that brings an event of the chat.")
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
        let result = try await withNode(store, readOnly: true) { node in try await ListPeers().run(on: node) }
        let sorted = result.peers
        if output.json { return printJSON(try JSONValueEncoder().encode(result)) }
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

func iso(_ millis: UInt64) -> String { ListPeers.Result.iso(millis) }
