#if Service
import ChorusService
import ChorusTestSupport
import Foundation
import Testing

@Suite("operating a serving node: metrics, logs, configuration")
struct OperationsTests {
    /// The value of one sample of the Prometheus text (`name{labels} value`).
    static func sample(_ text: String, _ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    /// Opens a TCP connection to `port`, writes garbage and closes it: a
    /// connection that fails before authentication.
    static func garbageConnection(port: Int) {
        guard let fd = rawTCPConnection(port: port) else { return }
        defer { close(fd) }
        let junk = [UInt8](repeating: 0x41, count: 200)
        _ = junk.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Sends the head of a 100 KB upload and 100 bytes of it on the API's
    /// Unix socket, then closes the connection.
    static func abortedUpload(socket path: String) {
        let fd = Foundation.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { return }
        let head = "POST /v1/pictures HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n"
        let request = Array(head.utf8) + [UInt8](repeating: 0x89, count: 100)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        usleep(100_000)
    }

    @Test("after mutations, a sync, a refused import and failed connections, /metrics shows each counter with its value; the log is JSON lines with one structured line per session and the failures rate-limited")
    func metricsAndLogs() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = dir.store("node")
        #expect(try await runCommand(chorus, ["init", "--store", store, "--name", "Node"]).status == 0)
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("peer"), "--network", store + "/network.json"]).status == 0)
        // The options come from a config file; the command line adds to it.
        let config = dir.store("serve.json")
        try Data(#"{"log-format": "json", "max-per-address": 8, "listen": "127.0.0.1:0"}"#.utf8).write(to: URL(fileURLWithPath: config))
        let server = try await ServerProcess.start(chorus: chorus, store: store, extra: ["--config", config])
        defer { server.kill() }

        for i in 0..<5 { #expect(try await runCommand(chorus, ["profile", "set", "bio", "edit \(i)", "--store", store]).status == 0) }
        #expect(try await runCommand(chorus, ["profile", "set", "bio", "peer", "--store", dir.store("peer")]).status == 0)
        let sync = try await runCommand(chorus, ["sync", "127.0.0.1:\(server.syncPort)", "--store", dir.store("peer")])
        #expect(sync.status == 0, "\(sync.stderr)")
        // A damaged event: its payload ("edit 3" in the raw envelope's hex) no longer matches its hash.
        let export = try await runCommand(chorus, ["export", "-", "--format", "jsonl", "--store", store])
        let damaged = export.stdout.replacingOccurrences(of: "656469742033", with: "656469742058")
        #expect(damaged != export.stdout)
        let imported = try await runCommand(chorus, ["import", "-", "--partial", "--store", store], input: Data(damaged.utf8))
        #expect(imported.status == 1)
        for _ in 0..<30 { Self.garbageConnection(port: server.syncPort) }
        // An upload the client abandons halfway: the client's failure, never counted as a 500.
        Self.abortedUpload(socket: APIPaths.socket(inStore: store))

        // The server notices the 30 closed connections in its own time: a bounded wait.
        var text = ""
        for _ in 0..<200 {
            let response = try await APIClient(.socket(inStore: store)).send(.GET, "/metrics")
            #expect(response.status == 200)
            text = response.text
            if Self.sample(text, "chorus_sync_unauthenticated_failures_total") == 30 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        func value(_ series: String) -> Double { Self.sample(text, series) ?? -1 }
        #expect(value("chorus_events_stored_total") >= 6, "\(text)")
        #expect(value("chorus_events_duplicate_total") >= 1)
        #expect(value(#"chorus_events_refused_total{reason="payload_hash_mismatch"}"#) == 1, "\(text)")
        #expect(value(#"chorus_sync_sessions_total{outcome="complete"}"#) == 1)
        #expect(value(#"chorus_sync_bytes_total{direction="in"}"#) > 100)
        #expect(value(#"chorus_sync_bytes_total{direction="out"}"#) > 100)
        #expect(value(#"chorus_sync_events_total{direction="received"}"#) >= 1)
        #expect(value("chorus_sync_unauthenticated_failures_total") == 30)
        #expect(value("chorus_sync_connections_open") >= 0)
        #expect(value("chorus_writer_batch_events_count") >= 6)
        #expect(value("chorus_writer_commit_seconds_count") >= 6)
        #expect(value("chorus_store_file_bytes") > 0)
        #expect(value("chorus_store_map_bytes") >= value("chorus_store_file_bytes"))
        #expect(value("chorus_store_events") >= 8)
        #expect(text.contains("hb_requests"), "Hummingbird's request metrics")
        #expect(!text.contains(#"status="500""#), "an aborted upload is not a server error: \(text)")
        // The process's own figures, the formats, live queries, and request latency buckets below a millisecond.
        #expect(value("process_resident_memory_bytes") > 1_000_000 && value("process_open_fds") > 3, "\(text)")
        #expect(value("process_cpu_seconds_total") > 0)
        #expect(text.contains(#"chorus_build_info{store_format=""#) && value("chorus_api_watchers") == 0)
        #expect(text.contains(#"le="0.0005""#), "sub-millisecond request buckets: \(text)")
        #expect(try await APIClient(.socket(inStore: store)).send(.GET, "/health").text == #"{"status":"ok","store":"ok","writer":"ok"}"#)

        #expect(await server.stop() == 0)
        let lines = server.output.split(separator: "\n").map(String.init)
        let entries = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: String] }
        #expect(entries.count == lines.count, "every log line is one JSON object: \(lines.filter { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) == nil })")
        let end = try #require(entries.first { $0["message"] == "session end" }, "\(lines)")
        for key in ["peer", "address", "events_received", "events_sent", "bytes_in", "bytes_out", "seconds", "outcome", "time", "level"] {
            #expect(end[key] != nil, "session end has no \(key): \(end)")
        }
        #expect(end["outcome"] == "complete")
        let failures = entries.filter { $0["message"]?.hasPrefix("connection failed before authentication") == true }
        #expect(failures.count == 10, "at most 10 failure lines per window, got \(failures.count)")
        let suppressed = entries.compactMap { $0["suppressed"].flatMap(Int.init) }.reduce(0, +)
        #expect(suppressed == 20, "the other 20 are counted: \(entries.filter { $0["suppressed"] != nil })")
        #expect(entries.contains { $0["message"] == "stopped" })
    }

    @Test("serving a store whose projections are stale logs why before it rebuilds them")
    func aRebuildBeforeServingIsLogged() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = dir.store("node")
        #expect(try await runCommand(chorus, ["init", "--store", store, "--name", "Node"]).status == 0)
        // Another slot price: the projections were built for another configuration.
        let network = store + "/network.json"
        let text = try String(contentsOfFile: network, encoding: .utf8)
        let changed = text.replacingOccurrences(of: "[0, 50,", with: "[0, 60,")
        #expect(changed != text)
        try changed.write(toFile: network, atomically: true, encoding: .utf8)
        let server = try await ServerProcess.start(chorus: chorus, store: store)
        defer { server.kill() }
        let log = server.output
        #expect(log.contains("rebuilding the projections from the log before serving"), "\(log)")
        #expect(log.contains("another network configuration"), "\(log)")
        let rebuilt = try #require(log.range(of: "rebuilding the projections"))
        let listening = try #require(log.range(of: "local API on"))
        #expect(rebuilt.lowerBound < listening.lowerBound)
    }

    @Test("a config file with an unknown option or a bad value is refused with the reason")
    func badConfig() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("s")]).status == 0)
        for (json, expected) in [
            (#"{"lisen": "127.0.0.1:0"}"#, #"unknown option "lisen""#), (#"{"max-per-address": "many"}"#, "wrong type"),
            (#"{"log-format": "xml"}"#, "--log-format must be text or json"), ("[1]", "not a JSON object"),
        ] {
            let path = dir.store("c.json")
            try Data(json.utf8).write(to: URL(fileURLWithPath: path))
            let r = try await runCommand(chorus, ["serve", "--store", dir.store("s"), "--config", path])
            #expect(r.status == 2 && r.stderr.contains(expected), "\(json): \(r.stderr)")
        }
    }
}
#endif
