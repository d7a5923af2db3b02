import ChorusNode
import ChorusStorage
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// The `.closingNodes` trait's registry: what a test opens is closed when it ends.
@Suite("What a test opens is closed when it ends")
struct ClosingNodesTests {
    @Test("a node and a relay a test opened are closed by the registry, however the test ended")
    func openedNodesAreClosed() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let registry = OpenedInTest()
        let (node, relay) = try await OpenedInTest.$current.withValue(registry) {
            (try await makeNode(dir, "left-open", network: testNetwork()), try await ServedRelay.start(dir, "relay", network: testNetwork()))
        }
        _ = try await node.setProfile(.bio, .text("open"))
        await registry.closeAll()
        await #expect(throws: StorageError.closed) { _ = try await node.setProfile(.bio, .text("closed")) }
        await #expect(throws: StorageError.closed) { _ = try await relay.node.setProfile(.bio, .text("closed")) }
        #expect(rawTCPConnection(port: relay.listener.port).map { fd in close(fd); return true } == nil, "the relay's port still accepts")
    }
}
