import ChorusCrypto
import Testing

@testable import ChorusSync

/// The session's smaller roles as values (`Session/SessionRoles.swift`):
/// which reconciliation messages a session admits, what live announcing
/// still owes the peer, and the outbox's load.
@Suite("Sync session roles")
struct SessionRolesTests {
    let round = SyncSession.ReconcileInput.round(ReconcileRound(count: 0, splits: [], leaves: []))
    let info = SyncSession.ReconcileInput.info(SketchInfo(count: 0, total: 0, setHash: Array(repeating: 0, count: 16), nonce: Array(repeating: 0, count: 16)))

    @Test("a tree admits rounds only, a sketch its own messages and rounds (its fallback), no reconciliation or an ended one nothing")
    func reconciliationAdmits() {
        var state = ReconcileState()
        #expect(!state.admits(round) && !state.admits(info))
        state.mode = .tree
        #expect(state.admits(round) && !state.admits(info))
        state.mode = .sketch
        #expect(state.admits(round) && state.admits(info))
        state.finished = true
        #expect(!state.admits(round) && !state.admits(info))
    }

    @Test("live announcing names only heads above what the peer is known to hold, and a lower note never lowers it")
    func peerHeads() {
        let (a, b) = (Random.bytes32(), Random.bytes32())
        var heads = PeerHeads()
        heads.note(a, holds: 5)
        heads.note(a, holds: 3)
        let offered = [FeedAnnouncement(author: a, seq: 5, head: .zero), FeedAnnouncement(author: a, seq: 6, head: .zero), FeedAnnouncement(author: b, seq: 1, head: .zero)]
        #expect(heads.lacking(offered).map(\.seq) == [6, 1])
    }

    @Test("the outbox counts frames and bytes queued and keeps its peak")
    func outboxLoad() {
        var load = OutboxLoad()
        load.queued(100)
        load.queued(50)
        load.taken(100)
        #expect(load.frames == 1 && load.bytes == 50 && load.peakBytes == 150)
    }
}
