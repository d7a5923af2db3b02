import ChorusCrypto
import ChorusNode
import ChorusSync
import Foundation
import ChorusTestSupport
import Testing

@Suite("Sync over encrypted TCP on 127.0.0.1", .closingNodes)
struct SyncTCPTests {
    @Test("a client syncs with a server over TCP, then live mode delivers a new event")
    func tcpSyncAndLive() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let server = try await makeNode(dir, "server", network: net)
        let client = try await makeNode(dir, "client", network: net)
        _ = try await server.addPicture(pictureBytes(42, size: 200_000), mime: "image/png").object
        _ = try await client.setProfile(.name, .text("client"))
        let lines = LogLines()
        let sync = try SyncServer(node: server, options: .patient(live: true), logger: collectingLogger(lines))
        let listener = try await sync.listen(host: "127.0.0.1", port: 0)
        let report = try await bounded(.seconds(120), "tcp sync") {
            try await SyncNetwork.sync(client, host: "127.0.0.1", port: listener.port, options: .patient)
        }
        #expect(report.complete && report.blobsReceived == 1 && report.eventsSent >= 1)
        #expect(try feedHeads(client) == feedHeads(server))
        #expect(try digest(client) == digest(server))

        var options = SyncOptions.patient(live: true)
        options.onComplete = { _ in }
        let opts = options
        let live = Task { try await SyncNetwork.sync(client, host: "127.0.0.1", port: listener.port, options: opts) }
        try await Task.sleep(for: .milliseconds(300))
        let e = try await server.setProfile(.bio, .text("pushed live"))
        #expect(try await eventually { try client.event(e.id) != nil })
        live.cancel()
        _ = try? await bounded(.seconds(120), "live end") { try await live.value }
        await listener.shutdown()
        await sync.shutdown()
        #expect(lines.all.contains { $0.contains("session end") })
        await server.close()
        await client.close()
    }
}

@Suite("Connection limits", .closingNodes)
struct ConnectionLimitTests {
    @Test func idleUnauthenticatedConnectionsCannotLockAnHonestPeerOut() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let server = try await makeNode(dir, "server", network: net)
        let client = try await makeNode(dir, "client", network: net)
        _ = try await server.setProfile(.bio, .text("served"))
        let sync = try SyncServer(node: server, options: .patient)
        // Room for 16 connections, 8 of them in their handshake.
        let limits = ConnectionLimits(total: 16, unauthenticated: 8, unauthenticatedPerAddress: 8, perAddress: 8)
        let listener = try await sync.listen(host: "127.0.0.1", port: 0, limits: limits)
        // Forty idle connections that never say a word, like a client without the network key.
        var idle: [Int32] = []
        for _ in 0..<40 { if let fd = rawTCPConnection(port: listener.port) { idle.append(fd) } }
        defer { for fd in idle { close(fd) } }
        #expect(idle.count == 40)
        func closedByServer() -> Int {
            idle.filter { fd in
                var byte: UInt8 = 0
                return recv(fd, &byte, 1, Int32(MSG_DONTWAIT)) == 0
            }.count
        }
        // A connect() returns before the server accepts (a full accept queue
        // takes the connection later), so wait until the server has seen all
        // forty: otherwise a late one is younger than the honest peer and
        // evicts it, which is the policy, not a failure.
        #expect(try await eventually(.seconds(120)) { closedByServer() >= 40 - 8 }, "only \(closedByServer()) closed")
        // The honest peer still completes its sync: it evicts the oldest idle one.
        let report = try await bounded(.seconds(120), "an honest sync beside idle connections") {
            try await SyncNetwork.sync(client, host: "127.0.0.1", port: listener.port, options: .patient)
        }
        #expect(report.complete)
        #expect(try client.head(of: server.identity.device.raw) != nil)
        // The server holds at most 8 idle ones: the others were closed (EOF
        // here), and the honest sync evicted one more.
        #expect(try await eventually(.seconds(120)) { closedByServer() >= 40 - 8 + 1 }, "only \(closedByServer()) closed")
        await listener.shutdown()
        await sync.shutdown()
        await server.close()
        await client.close()
    }
}
