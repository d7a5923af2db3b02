import Testing

@testable import ChorusSync

/// Which received messages wait for the events and blobs before them to be
/// stored (Specs/sync.md §4.3).
@Suite("Messages that wait for what was received before them", .closingNodes)
struct ReceiveOrderTests {
    /// An `ack` of this side's frames and the peer's `done` concern only this
    /// side's sending: waiting on them made a receiver stop reading until
    /// everything it had buffered was durable.
    @Test func onlyMoreDataAcksAndDoneGoOnAtOnce() {
        let goOnBeforeEvents = Set(SyncMessage.Code.allCases.filter { !$0.waitsForReceivedEvents })
        let goOnBeforeBlobs = Set(SyncMessage.Code.allCases.filter { !$0.waitsForReceivedBlobs })
        #expect(goOnBeforeEvents == [.events, .ack, .done])
        #expect(goOnBeforeBlobs == [.blobData, .ack, .done])
    }

    /// What reads the store or the fetch's state after the events: the end
    /// of a round, the blob requests that follow it, the end of the blobs.
    @Test func theEndsOfRoundsWaitForWhatCameBefore() {
        for code in [SyncMessage.Code.eventsEnd, .blobWant, .blobEnd, .blobMissing, .want, .have, .haveEnd, .reconcile] {
            #expect(code.waitsForReceivedEvents, "\(code)")
        }
        for code in [SyncMessage.Code.eventsEnd, .blobEnd, .blobMissing] {
            #expect(code.waitsForReceivedBlobs, "\(code)")
        }
    }
}
