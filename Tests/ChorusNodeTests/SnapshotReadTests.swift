import ChorusCrypto
import ChorusCBOR
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusTestSupport
import Dispatch
import Foundation
import Testing

/// `node.read { … }`: the reads inside answer from one transaction
/// (Specs/storage.md §6), so a screen made of several reads shows one state.
@Suite("Reads from one snapshot", .closingNodes)
struct SnapshotReadTests {
    @Test("reads inside node.read see the state it began with while commits land; the next read sees them")
    func readsInsideOneSnapshotIgnoreLaterCommits() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let me = node.identity.user
        let picture = try await node.addPicture([0x89, 0x50, 0x4E, 0x47] + [UInt8](repeating: 7, count: 64), mime: "image/png").object
        _ = try await node.setProfile(.bio, .text("before"))

        // The commits land while the snapshot is open: the body waits for
        // them on a thread of its own, never on a cooperative one.
        let begun = DispatchSemaphore(value: 0)
        let committed = DispatchSemaphore(value: 0)
        let writes = Task {
            begun.wait()
            _ = try await node.setProfile(.bio, .text("after"))
            _ = try await node.like(picture)
            committed.signal()
        }
        let inside = try await offThePool {
            try node.read {
                let first = (try node.profile(of: me).bio, try node.likes(of: picture))
                begun.signal()
                guard committed.wait(timeout: .now() + 60) == .success else { throw TestFailure("the writes did not commit within 60 s") }
                // Nested reads join the same snapshot.
                let nested = try node.read { (try node.profile(of: me).bio, try node.likes(of: picture)) }
                return [first.0, nested.0, "\(first.1.count)", "\(nested.1.count)"]
            }
        }
        try await writes.value
        #expect(inside == ["before", "before", "0", "0"])
        // Outside the snapshot, reads see the commits.
        #expect(try node.profile(of: me).bio == "after")
        #expect(try node.likes(of: picture) == [me])
        #expect(try node.read { try node.likes(of: picture) } == [me])
    }

    struct PictureScreen: Equatable {
        var picture: PictureLookup
        var likes: [UserID]
    }

    @Test("an observation made of several reads reads them from one snapshot and follows the commits that touch them")
    func observationOfSeveralReads() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let picture = try await node.addPicture([0x89, 0x50, 0x4E, 0x47] + [UInt8](repeating: 7, count: 64), mime: "image/png").object
        let seen = try await bounded(.seconds(120), "the observed screens") {
            var seen: [PictureScreen] = []
            for try await screen in node.observe({ node in
                try node.read { PictureScreen(picture: try node.picture(picture), likes: try node.likes(of: picture)) }
            }) {
                seen.append(screen)
                switch seen.count {
                case 1: _ = try await node.like(picture)
                case 2: _ = try await node.deletePicture(picture)
                default: return seen
                }
            }
            return seen
        }
        try #require(seen.count == 3)
        #expect(seen.map(\.likes) == [[], [node.identity.user], []])
        if case .live = seen[0].picture {} else { Issue.record("the picture is not live at first: \(seen[0].picture)") }
        if case .deleted = seen[2].picture {} else { Issue.record("the picture is not deleted at last: \(seen[2].picture)") }
    }
}
