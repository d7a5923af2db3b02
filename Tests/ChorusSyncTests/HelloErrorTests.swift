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
        let session = try SyncSession(node: node, transport: serverSide, options: .patient)
        let run = Task { try await session.run() }
        try await peerSide.send(first)
        var frames: [SyncMessage] = []
        _ = try await bounded(.seconds(120), "the server's answer") {
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

    /// A peer that never says hello: the session ends with `timeout` and
    /// the connection closes; closing it at the limit is not the peer
    /// closing it (`connection_closed`).
    @Test func aMissingHelloEndsTheSessionWithATimeout() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let node = try await makeNode(dir, "server", network: testNetwork())
        let (serverSide, peerSide) = MemoryTransport.pair(node.identity.device.raw, Random.bytes32())
        var options = SyncOptions.patient
        options.helloTimeout = .milliseconds(200)
        let session = try SyncSession(node: node, transport: serverSide, options: options)
        guard let syncError = try await sessionError(session) else { return }
        #expect(syncError.code == "timeout", "\(syncError)")
        // The connection is closed at the limit: the peer reads its end.
        let end = try await bounded(.seconds(120), "the connection's end") { () async -> Bool in
            while true {
                do { if try await peerSide.receive() == nil { return true } } catch { return true }
            }
        }
        #expect(end)
        await node.close()
    }
}

/// A session whose own store fails says so (`local_failure`), not that the
/// connection closed.
@Suite("A session's own failure", .closingNodes)
struct LocalFailureTests {
    @Test func aClosedStoreEndsTheSessionWithLocalFailure() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let node = try await makeNode(dir, "server", network: testNetwork())
        _ = try await node.setProfile(.bio, .text("mine"))
        let (serverSide, peerSide) = MemoryTransport.pair(node.identity.device.raw, Random.bytes32())
        let session = try SyncSession(node: node, transport: serverSide, options: .patient)
        // Closed under the session: its first read of the store (the blob
        // serial the peer's hello asks for) fails.
        await node.close()
        try await peerSide.send(SyncMessage.hello(SyncHello(user: Random.bytes32(), capabilities: [.blobs, .blobSerial], hops: nil, since: 0)).encoded())
        guard let syncError = try await sessionError(session) else { return }
        #expect(syncError.code == "local_failure", "\(syncError)")
    }
}

/// The `SyncError` a session ends with; nil (with an issue recorded) when it
/// completes or fails otherwise.
func sessionError(_ session: SyncSession) async throws -> SyncError? {
    let outcome: Result<SyncReport, any Error> = try await bounded(.seconds(120), "the session's end") {
        do { return .success(try await session.run()) } catch { return .failure(error) }
    }
    guard case .failure(let error) = outcome, let syncError = error as? SyncError else {
        Issue.record("expected a sync error, got \(outcome)")
        return nil
    }
    return syncError
}
