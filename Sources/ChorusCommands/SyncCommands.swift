import ArgumentParser
import ChorusCommandLine
import ChorusCrypto
import ChorusNode
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
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { continuation.yield(sig) }
            source.resume()
            sources.append(source)
        }
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
                let r = await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
                stopper.cancel()
                return r
            }
            return await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
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
                ("damaged_blobs", .array(r.damagedBlobs.map { .string($0.hex) })),
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
        for hash in r.damagedBlobs {
            emit("  damaged:  blob \(hash.hex) no longer matches its hash in this store; answered as missing. Fetch it again from a peer.")
        }
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
