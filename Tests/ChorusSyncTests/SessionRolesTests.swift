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

    @Test("a session completes when both sides said done; a second done from the peer is an error; the first error wins, and none after a completed close")
    func ending() throws {
        var ending = SessionEnding()
        ending.saidDone()
        #expect(!ending.bothDone)
        try ending.peerSaidDone()
        #expect(ending.bothDone)
        #expect(throws: SyncError.self) { try ending.peerSaidDone() }
        ending.close()
        #expect(ending.isStopping && ending.error == nil)
        let lateFailure = ending.fail(.connectionClosed, complete: true)
        #expect(!lateFailure)  // a completed session that closed has no error
        #expect(ending.error == nil)

        var failing = SessionEnding()
        let first = failing.fail(.connectionClosed, complete: false)
        let second = failing.fail(.idle("later"), complete: false)
        #expect(first && !second)
        #expect(failing.error == .connectionClosed && failing.closing)
    }

    @Test("a session is idle once nothing moved for the limit")
    func idle() {
        var watch = IdleWatch()
        watch.progressed()
        let start = watch.lastProgress
        #expect(!watch.isIdle(now: start + .seconds(59), limit: .seconds(60)))
        #expect(watch.isIdle(now: start + .seconds(60), limit: .seconds(60)))
    }
}
