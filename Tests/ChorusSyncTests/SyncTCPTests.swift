import ChorusCrypto
import ChorusNode
import ChorusSync
import Foundation
import Testing

@Suite("Sync over encrypted TCP on 127.0.0.1")
struct SyncTCPTests {
    @Test("a client syncs with a server over TCP, then live mode delivers a new event")
    func tcpSyncAndLive() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let server = try await makeNode(dir, "server", network: net)
        let client = try await makeNode(dir, "client", network: net)
        _ = try await server.addPicture(pictureBytes(42, size: 200_000), mime: "image/png")
        _ = try await client.setProfile(.name, .text("client"))
        let lines = LogLines()
        let sync = try SyncServer(node: server, log: { lines.append($0) })
        let listener = try await sync.listen(host: "127.0.0.1", port: 0)
        let report = try await bounded(.seconds(30), "tcp sync") {
            try await SyncNetwork.sync(client, host: "127.0.0.1", port: listener.port)
        }
        #expect(report.complete && report.blobsReceived == 1 && report.eventsSent >= 1)
        #expect(try feedHeads(client) == feedHeads(server))
        #expect(try digest(client) == digest(server))

        var options = SyncOptions(live: true)
        options.onComplete = { _ in }
        let opts = options
        let live = Task { try await SyncNetwork.sync(client, host: "127.0.0.1", port: listener.port, options: opts) }
        try await Task.sleep(for: .milliseconds(300))
        let e = try await server.setProfile(.bio, .text("pushed live"))
        #expect(try await eventually { try client.event(e.id) != nil })
        live.cancel()
        _ = try? await bounded(.seconds(30), "live end") { try await live.value }
        await listener.shutdown()
        await sync.shutdown()
        #expect(lines.all.contains { $0.contains("session end") })
        await server.close()
        await client.close()
    }
}
