import ChorusNode
import ChorusSync
import Foundation
import Testing

/// Specs/sync-transport.md §6a under a real descriptor limit: `chorus serve`
/// in a child process with `ulimit -n 1024`, flooded with more idle TCP
/// connections than it has descriptors, from a client without the network key.
@Suite("Descriptor exhaustion")
struct DescriptorTests {
    /// User plus system CPU seconds `pid` has used (/proc/PID/stat).
    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the command name: state is field 3, utime 14, stime 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    @Test("under ulimit -n 1024, 1,124 idle connections neither lock an honest peer out nor spin the server")
    func idleFloodUnderDescriptorLimit() async throws {
        // This process needs room for the flood's sockets.
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < 4096 {
            limit.rlim_cur = min(4096, limit.rlim_max)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        guard limit.rlim_cur >= 1400 else {
            print("skipped: this process may open only \(limit.rlim_cur) descriptors (hard limit \(limit.rlim_max)); the flood needs 1,400")
            return
        }
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let serverPath = dir.store("server")
        do {
            let s = try await makeNode(dir, "server", network: net)
            _ = try await s.setProfile(.bio, .text("served under a descriptor limit"))
            await s.close()
        }
        let client = try await makeNode(dir, "client", network: net)
        let (server, port) = try await ChorusProcess.serve(store: serverPath, fileLimit: 1024)
        defer { server.kill() }
        let pid = server.process.processIdentifier

        // The honest sync's duration with nothing else going on.
        var t0 = ContinuousClock.now
        let quiet = try await bounded(.seconds(60), "a sync without the flood") { try await SyncNetwork.sync(client, host: "127.0.0.1", port: port) }
        let quietTime = t0.duration(to: .now)
        #expect(quiet.complete)

        // 1,124 connections that never say a word.
        var idle: [Int32] = []
        defer { for fd in idle { Foundation.close(fd) } }
        let deadline = ContinuousClock.now + .seconds(60)
        while idle.count < 1124, ContinuousClock.now < deadline {
            if let fd = ConnectionLimitTests.idleConnection(port: port) { idle.append(fd) }
        }
        #expect(idle.count == 1124)
        try await Task.sleep(for: .seconds(1))

        // The server at rest under the flood: no hot accept loop.
        let cpu0 = Self.cpuSeconds(pid)
        t0 = ContinuousClock.now
        try await Task.sleep(for: .seconds(3))
        let window = t0.duration(to: .now)
        let cpu1 = Self.cpuSeconds(pid)
        let share = cpu0.flatMap { a in cpu1.map { b in (b - a) / (Double(window.components.seconds) + Double(window.components.attoseconds) / 1e18) } }

        // An honest sync meanwhile, with something to carry.
        _ = try await client.setProfile(.bio, .text("synced through the flood"))
        t0 = ContinuousClock.now
        let report = try await bounded(.seconds(60), "a sync beside 1,124 idle connections") {
            try await SyncNetwork.sync(client, host: "127.0.0.1", port: port)
        }
        let floodTime = t0.duration(to: .now)
        print("descriptor flood: \(idle.count) idle connections; server CPU \(share.map { String(format: "%.1f %%", $0 * 100) } ?? "unknown") of a core over \(window); honest sync \(floodTime) (without the flood \(quietTime))")
        #expect(report.complete && report.eventsSent == 1)
        #expect(floodTime <= quietTime * 2 + .seconds(2), "the honest sync took \(floodTime), \(quietTime) without the flood")
        if let share { #expect(share < 0.10, "the server used \(share * 100) % of a core while the connections sat idle") }
        #expect(server.process.isRunning)
        server.process.terminate()
        #expect(try await server.waitExit() == 0)
        await client.close()
    }
}
