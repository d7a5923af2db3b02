// chorus-bench peers: one serving node and many honest peers syncing at once.
import ArgumentParser
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusParallel
import ChorusProjections
import ChorusSync
import Foundation

struct PeersBenchOptions: ParsableArguments {
    @Option(help: "Peers syncing at once.") var peers = 200
    @Option(help: "New events each peer brings.") var eventsPerPeer = 1_000
    @Option(help: "Seconds of the verify-rate measurement.") var seconds = 2.0
    @Flag(help: "Print machine-readable JSON.") var json = false
    func validate() throws {
        if peers < 1 || eventsPerPeer < 1 { throw ValidationError("--peers and --events-per-peer must be at least 1") }
    }
}

struct PeersBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peers",
        abstract: "One serving node and N peers each syncing M new events at once over loopback.",
        discussion: """
            Builds N peer nodes, each holding M new events of its own (signed and ingested before any \\
            timing), and one serving node in the same network. Measures the all-core verify rate, then \\
            starts every peer's sync with the server at once over 127.0.0.1 and reports the events the \\
            server received per second as a ratio to verify, the p50/p99 session time, and the \\
            process's peak anonymous memory (sampled) with its growth per connection.
            """)
    @OptionGroup var options: PeersBenchOptions
    func run() async throws { try await runPeersBenchmark(options) }
}

/// The process's anonymous resident memory now, from /proc (0 elsewhere).
func anonymousMemory() -> Int { residentMemory().anonymous }

/// The CPU time the whole process has used, every thread, user and kernel.
func processCPUSeconds() -> Double {
    var usage = rusage()
    #if os(Linux)
    let who = RUSAGE_SELF.rawValue
    #else
    let who = RUSAGE_SELF
    #endif
    guard getrusage(who, &usage) == 0 else { return 0 }
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CPU time of the calling thread, user and kernel.
func threadCPUSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Bytes the named thread of this process has handed to `write`/`pwrite`
/// so far (`wchar` of /proc/self/task/TID/io; nil elsewhere or when no
/// thread has that name). For the writer, that is the pages its commits wrote.
func threadBytesWritten(named name: String) -> Int? {
    guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
    for task in tasks {
        let comm = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
        guard comm.trimmingCharacters(in: .whitespacesAndNewlines) == name, let written = bytesWritten(task: "/proc/self/task/\(task)")
        else { continue }
        return written
    }
    return nil
}

/// `threadBytesWritten` of the calling thread.
func currentThreadBytesWritten() -> Int? { bytesWritten(task: "/proc/thread-self") }

/// `wchar` of the task whose /proc directory is `task`.
private func bytesWritten(task: String) -> Int? {
    guard let io = try? String(contentsOfFile: task + "/io", encoding: .utf8),
        let line = io.split(separator: "\n").first(where: { $0.hasPrefix("wchar:") })
    else { return nil }
    return Int(line.dropFirst("wchar:".count).trimmingCharacters(in: .whitespaces))
}

/// The process's resident memory now, from /proc/self/status (zeros
/// elsewhere): anonymous (its heap), and file-backed (for a node, mostly
/// the pages of the store's memory map, which the kernel can drop).
func residentMemory() -> (anonymous: Int, file: Int) {
    guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name) }),
            let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return 0 }
        return kb * 1024
    }
    return (field("RssAnon:"), field("RssFile:"))
}

/// Samples `residentMemory()` every 20 ms on a thread of its own while
/// `body` runs; returns the peaks of each kind.
func peakResidentMemory<T>(during body: () async throws -> T) async rethrows -> (result: T, anonymous: Int, file: Int) {
    let anonymous = PeakSampler()
    let file = PeakSampler()
    let stop = PeakSampler()
    let thread = Thread {
        while stop.value == 0 {
            let now = residentMemory()
            anonymous.sample(now.anonymous)
            file.sample(now.file)
            Thread.sleep(forTimeInterval: 0.02)
        }
    }
    thread.start()
    let result = try await body()
    stop.sample(1)
    let now = residentMemory()
    anonymous.sample(now.anonymous)
    file.sample(now.file)
    return (result, anonymous.value, file.value)
}

func runPeersBenchmark(_ options: PeersBenchOptions) async throws {
    let cores = ProcessInfo.processInfo.activeProcessorCount
    let dir = temporaryDirectory("peers")
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let network = NetworkConfig(networkKey: Random.bytes32())
    let server = try await Node.create(at: dir + "/server", deviceName: "server", network: network)

    Bench.note("building \(options.peers) peers with \(options.eventsPerPeer) events each...")
    var peers: [Node] = []
    for p in 0..<options.peers {
        let node = try await Node.create(at: dir + "/peer\(p)", deviceName: "peer\(p)", network: network)
        let items = (0..<options.eventsPerPeer).map { i in
            PendingEvent(ProfileSetPayload(field: .bio, value: .text("peer \(p) event \(i) " + String(repeating: "p", count: 120))),
                object: node.identity.user.raw)
        }
        try await node.appendBatch(items)
        peers.append(node)
    }
    let before = try server.log.eventCount()
    let expected = try peers.reduce(0) { $0 + (try $1.log.eventCount()) }

    Bench.note("raw Ed25519 verify on \(cores) cores...")
    let verifyAll = VerifySet(synthetic: 8_192).perSecond(threads: cores, seconds: options.seconds)

    let sync = try SyncServer(node: server, options: SyncOptions())
    // Every peer connects from 127.0.0.1: the per-address limits must allow them all.
    let limits = ConnectionLimits(
        total: options.peers + 64, unauthenticated: options.peers + 16, unauthenticatedPerAddress: options.peers + 16,
        perAddress: options.peers + 16)
    let listener = try await sync.listen(host: "127.0.0.1", port: 0, limits: limits)
    let baseline = anonymousMemory()
    let peak = PeakSampler()
    let sampling = Task { while !Task.isCancelled { peak.sample(anonymousMemory()); try? await Task.sleep(for: .milliseconds(20)) } }

    Bench.note("\(options.peers) peers sync at once...")
    let start = Bench.clock()
    // Every session runs to its own end, failed or not: one failure must
    // not cancel the others and hide how many failed, and why.
    let outcomes = await withTaskGroup(of: Result<Double, SyncError>.self) { group in
        for peer in peers {
            group.addTask {
                let s = Bench.clock()
                do {
                    let report = try await SyncNetwork.sync(peer, host: "127.0.0.1", port: listener.port)
                    guard report.complete else { return .failure(.local("the session ended incomplete")) }
                    return .success(Bench.clock() - s)
                } catch {
                    return .failure(error as? SyncError ?? .local("\(error)"))
                }
            }
        }
        return await group.reduce(into: []) { $0.append($1) }
    }
    let elapsed = Bench.clock() - start
    sampling.cancel()
    let durations = outcomes.compactMap { try? $0.get() }
    let failures = Dictionary(grouping: outcomes.compactMap { r -> SyncError? in if case .failure(let e) = r { e } else { nil } }, by: \.code)
    guard failures.isEmpty else {
        let counts = failures.sorted { $0.key < $1.key }.map { "\($0.value.count) \($0.key) (\($0.value[0]))" }
        FileHandle.standardError.write(Data("\(options.peers - durations.count) of \(options.peers) syncs failed: \(counts.joined(separator: "; "))\n".utf8))
        throw ExitCode(1)
    }
    let received = try server.log.eventCount() - before
    guard received >= expected else {
        FileHandle.standardError.write(Data("the server holds \(received) new events, expected \(expected)\n".utf8))
        throw ExitCode(1)
    }
    await listener.shutdown()
    await sync.shutdown()
    for p in peers { await p.close() }
    await server.close()

    let rateReceived = Double(received) / elapsed
    let (p50, p99) = percentiles(durations)
    let growth = max(0, peak.value - baseline)
    if options.json {
        print(JSONValue.object([
            ("peers", .uint(UInt64(options.peers))), ("events_received", .uint(UInt64(received))),
            ("seconds", .string(String(format: "%.2f", elapsed))), ("events_per_second", .uint(UInt64(rateReceived))),
            ("verify_all_cores", .uint(UInt64(verifyAll))), ("ratio", .string(String(format: "%.3f", rateReceived / verifyAll))),
            ("session_p50_ms", .string(String(format: "%.1f", p50))), ("session_p99_ms", .string(String(format: "%.1f", p99))),
            ("peak_anonymous_bytes", .uint(UInt64(peak.value))), ("growth_per_connection_bytes", .uint(UInt64(growth / options.peers))),
        ]).rendered())
        return
    }
    print("chorus-bench peers on \(cores) cores: \(options.peers) peers × \(options.eventsPerPeer) events into one server")
    print("Ed25519 verify, \(cores) cores (limit): \(Int(verifyAll))/s")
    print(String(format: "server received %d events in %.2f s: %d/s, %.2f of verify", received, elapsed, Int(rateReceived), rateReceived / verifyAll))
    print(String(format: "session time p50 %.0f ms, p99 %.0f ms", p50, p99))
    print("peak anonymous memory \(peak.value / 1_000_000) MB (all \(options.peers + 1) nodes in this process), "
        + "\(growth / options.peers / 1000) KB more per connection than before the syncs")
}

/// The largest value sampled, from any task.
final class PeakSampler: @unchecked Sendable {
    private let lock = NSLock()
    private var peak = 0
    func sample(_ v: Int) { lock.withLock { peak = max(peak, v) } }
    var value: Int { lock.withLock { peak } }
}
