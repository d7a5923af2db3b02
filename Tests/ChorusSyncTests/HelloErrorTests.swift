import ChorusCrypto
import ChorusNode
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Specs/sync.md §4.1, §7: a side that refuses the peer's first message
/// says why in an `error` frame before it closes.
@Suite("A refused hello is answered with an error", .closingNodes)
struct HelloErrorTests {
    @Test(
        "a malformed first frame, a first message that is not a hello and a newer version each get an error frame naming the code",
        arguments: [
            ([0xFF, 0x00], "malformed_message"),
            (SyncMessage.haveEnd(position: 1).encoded(), "unexpected_message"),
            (SyncMessage.hello(SyncHello(version: 2, user: Random.bytes32(), capabilities: [], hops: nil, since: 0)).encoded(), "unsupported_version"),
        ])
    func refusedHello(first: [UInt8], code: String) async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let node = try await makeNode(dir, "server", network: testNetwork())
        let peerKey = Random.bytes32()
        let (serverSide, peerSide) = MemoryTransport.pair(node.identity.device.raw, peerKey)
        let session = try SyncSession(node: node, transport: serverSide)
        let run = Task { try await session.run() }
        try await peerSide.send(first)
        var frames: [SyncMessage] = []
        _ = try await bounded(.seconds(60), "the server's answer") {
            var out: [SyncMessage] = []
            while let frame = try? await peerSide.receive() {
                if let m = try? SyncMessage.decode(frame) { out.append(m) }
            }
            return out
        }.map { frames.append($0) }
        #expect(frames.contains { if case .error(let c, _) = $0 { c == code } else { false } }, "\(frames)")
        _ = try? await run.value
        await node.close()
    }
}
