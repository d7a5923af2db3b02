// `chorus-bench observe`: what live observation costs (issue 11): an ingest
// of 20,000 events with 100 observers open against the same ingest with
// none, and the time from a commit to an open chat observer's new value.
import ArgumentParser
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusParallel
import ChorusProjections
import Dispatch
import Foundation
import Synchronization

struct ObserveBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "observe",
        abstract: "The cost of live observation: ingest with observers open, and commit-to-observer latency.",
        discussion: """
            Signs N events (profile edits of A authors) before any timing, then ingests them into a fresh \
            node in sync-sized calls with no observer, and into another fresh node with O observers open \
            (each on one author's profile), alternately, R rounds, and reports the best of each as a \
            slowdown (target at most 10 %). Then one observer on a chat page while M messages are sent \
            one by one: the time from each commit's announcement to the observer's new page, p50/p99 \
            (target 10 ms).
            """)
    @Option(help: "Events to ingest.") var events = 20_000
    @Option(help: "Authors of the events.") var authors = 100
    @Option(help: "Observers open during the observed ingest.") var observers = 100
    @Option(help: "Envelopes per Node.ingest call.") var batch = 2_000
    @Option(help: "Rounds of each ingest.") var rounds = 3
    @Option(help: "Messages for the latency figure.") var messages = 300
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if events < 100 || authors < 1 || observers < 1 || batch < 1 || rounds < 1 || messages < 10 {
            throw ValidationError("every count must be positive (events ≥ 100, messages ≥ 10)")
        }
    }

    func run() async throws {
        let keys = (0..<authors).map { _ in SigningKey.generate() }
        let perAuthor = events / authors
        let jobs = keys.enumerated().map { ($0.offset, $0.element) }
        let feeds: [[[UInt8]]] = parallelMap(jobs, chunk: 1) { (_, key) in
            var prev: EventID? = nil
            var out: [[UInt8]] = []
            for seq in 1...UInt64(perAuthor) {
                let e = try! Event.sign(
                    with: key, seq: seq, prev: prev, hlc: HLC(physicalMillis: 1_700_000_000_000 + seq, logical: 0),
                    kind: .profileSet, object: key.publicKey,
                    payload: .textMap([("field", .text("bio")), ("value", .text("bio number \(seq)"))]))
                prev = e.id
                out.append(e.encoded())
            }
            return out
        }
        // Interleaved by round of seq, as many peers' frames would arrive.
        var envelopes: [[UInt8]] = []
        for i in 0..<perAuthor { for f in feeds { envelopes.append(f[i]) } }

        func ingest(observing: Bool) async throws -> Double {
            let dir = temporaryDirectory("observe")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let node = try await Node.create(at: dir + "/store", network: NetworkConfig())
            var consumers: [Task<Void, any Error>] = []
            if observing {
                for i in 0..<observers {
                    let who = keys[i % keys.count].publicKey
                    let stream = node.observe { node in try node.projections.profile(who) }
                    consumers.append(Task { for try await _ in stream {} })
                }
            }
            let start = Bench.clock()
            var offset = 0
            while offset < envelopes.count {
                let end = min(envelopes.count, offset + batch)
                _ = await node.ingest(Array(envelopes[offset..<end]))
                offset = end
            }
            let seconds = Bench.clock() - start
            for c in consumers { c.cancel() }
            await node.close()
            return seconds
        }
        var plain = Double.infinity
        var observed = Double.infinity
        for round in 0..<rounds {
            Bench.note("round \(round + 1) of \(rounds)...")
            plain = min(plain, try await ingest(observing: false))
            observed = min(observed, try await ingest(observing: true))
        }
        let slowdown = observed / plain - 1

        // Latency: one chat observer while messages arrive one commit at a time.
        let dir = temporaryDirectory("observe-latency")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let node = try await Node.create(at: dir + "/store", network: NetworkConfig())
        let chat = try await node.createChat(title: "latency").object
        let notifier = node.arrivalNotifier
        let latencies = Mutex<[Double]>([])
        let stream = node.observe { node in try node.readableChatPage(chat, limit: 50) }
        let consumer = Task {
            for try await _ in stream {
                let now = DispatchTime.now().uptimeNanoseconds
                let committed = notifier.lastCommitUptimeNanoseconds
                if committed > 0 { latencies.withLock { $0.append(Double(now &- committed) / 1e9) } }
            }
        }
        for i in 0..<messages {
            _ = try await node.sendMessage(chat, text: "message \(i)").id
            // One commit at a time: wait until the observer has seen it.
            let deadline = Bench.clock() + 10
            while latencies.withLock({ $0.count }) < i + 1, Bench.clock() < deadline { try await Task.sleep(for: .milliseconds(1)) }
        }
        consumer.cancel()
        await node.close()
        let (p50, p99) = percentiles(latencies.withLock { $0 })

        if json {
            print(JSONValue.object([
                ("events", .uint(UInt64(envelopes.count))), ("observers", .uint(UInt64(observers))), ("batch", .uint(UInt64(batch))),
                ("ingest_seconds", .string(String(format: "%.3f", plain))), ("observed_ingest_seconds", .string(String(format: "%.3f", observed))),
                ("slowdown", .string(String(format: "%.3f", slowdown))), ("slowdown_target", .string("0.10")), ("slowdown_met", .bool(slowdown <= 0.10)),
                ("latency_p50_ms", .string(String(format: "%.3f", p50))), ("latency_p99_ms", .string(String(format: "%.3f", p99))),
                ("latency_target_ms", .uint(10)), ("latency_met", .bool(p99 <= 10)),
            ]).rendered())
            return
        }
        print("chorus-bench observe: \(envelopes.count) events from \(authors) authors in calls of \(batch), best of \(rounds) rounds")
        print("ingest, no observer           \(String(format: "%.3f", plain)) s (\(Int(Double(envelopes.count) / plain))/s)")
        print("ingest, \(observers) observers open     \(String(format: "%.3f", observed)) s: \(String(format: "%+.1f", slowdown * 100)) %   target ≤ +10 %   \(slowdown <= 0.10 ? "met" : "NOT MET")")
        print("commit to chat observer       p50 \(String(format: "%.3f", p50)) ms, p99 \(String(format: "%.3f", p99)) ms over \(messages) messages   target ≤ 10 ms   \(p99 <= 10 ? "met" : "NOT MET")")
    }
}
