import ChorusCrypto
import ChorusNode
import ChorusProjections
import ChorusSync
import Foundation
import Testing

@Suite("chorus serve --network-key", .closingNodes)
struct NetworkKeyTests {
    @Test("a key file overrides the store's network key: peers of that network connect, the store's own network cannot")
    func keyFileOverridesTheStoresKey() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let network = testNetwork()
        let otherNetwork = testNetwork()
        // The server's store was created in another network; the operator
        // hands it this network's key in a file.
        let server = try await makeNode(dir, "server", network: otherNetwork)
        try await server.setProfile(.bio, .text("served with an outside key"))
        await server.close()
        let client = try await makeNode(dir, "client", network: network)
        let stranger = try await makeNode(dir, "stranger", network: otherNetwork)
        let keyFile = dir.store("network.key")
        try Data((network.networkKey.hex + "\n").utf8).write(to: URL(fileURLWithPath: keyFile))

        let (process, port) = try await ChorusProcess.serve(store: dir.store("server"), extra: ["--network-key", keyFile])
        defer { process.kill() }
        let report = try await SyncNetwork.sync(client, host: "127.0.0.1", port: port, options: SyncOptions.patient)
        #expect(report.complete && report.eventsReceived > 0)
        // A node holding the store's own (overridden) key cannot finish the handshake.
        await #expect(throws: (any Error).self) {
            _ = try await SyncNetwork.sync(stranger, host: "127.0.0.1", port: port, options: SyncOptions.patient)
        }
        process.process.terminate()
        #expect(try await process.waitExit() == 0)
        await client.close()
        await stranger.close()

        // A file that is not a key is refused at start, with exit status 2.
        try Data("not a key".utf8).write(to: URL(fileURLWithPath: keyFile))
        let bad = try ChorusProcess(["serve", "--store", dir.store("server"), "--listen", "127.0.0.1:0", "--network-key", keyFile])
        #expect(try await bad.waitExit() == 2)
        #expect(bad.lines.all.contains { $0.contains("64 hex digits") })
    }
}
