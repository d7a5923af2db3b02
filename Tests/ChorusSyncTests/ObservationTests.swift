import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// Reads the next value of an observation, failing instead of hanging.
func next<Value: Sendable>(_ iterator: inout AsyncThrowingStream<Value, any Error>.Iterator, _ what: String) async throws -> Value? {
    nonisolated(unsafe) var it = iterator
    defer { iterator = it }
    return try await bounded(.seconds(120), what) { try await it.next() }
}

/// A value shared between a test and the tasks it starts.
final class Shared<T: Sendable>: Sendable {
    private let value: Mutex<T>
    init(_ initial: T) { value = Mutex(initial) }
    func withLock<R>(_ body: (inout T) -> R) -> R { value.withLock { body(&$0) } }
}

@Suite("Observation: live queries on a node", .closingNodes)
struct ObservationTests {
    @Test func anObserverSeesTheCurrentValueThenOnlyChanges() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let node = try await makeNode(dir, "alice", network: testNetwork())
        let me = node.identity.user
        let reads = Shared(0)
        let seen = Shared<[CBORValue?]>([])
        let stream = node.observe { node -> CBORValue? in
            defer { reads.withLock { $0 += 1 } }
            return try node.projections.profile(me).field("bio")
        }
        let collector = Task {
            for try await value in stream { seen.withLock { $0.append(value) } }
        }
        /// Waits until the observer has read the state after `n` reads in all.
        func readsReach(_ n: Int) async throws {
            #expect(try await eventually { reads.withLock { $0 } >= n }, "the observer read \(reads.withLock { $0 }) times, not \(n)")
        }
        func seenReach(_ n: Int) async throws {
            #expect(try await eventually { seen.withLock { $0.count } >= n })
        }
        try await readsReach(1)
        try await seenReach(1)
        _ = try await node.setProfile(.bio, .text("climber"))
        try await readsReach(2)
        try await seenReach(2)
        // Commits that do not change the bio are read but not yielded.
        // A commit that wrote what the read read runs it again, though the
        // bio did not change; it yields nothing new.
        _ = try await node.setProfile(.city, .text("Lisbon"))
        try await readsReach(3)
        // A commit of other objects does not run it at all.
        _ = try await node.createChat(title: "nothing to do with the bio").object
        _ = try await node.setProfile(.bio, .text("climber"))  // the same value again
        try await readsReach(4)
        _ = try await node.setProfile(.bio, .text("photographer"))
        try await readsReach(5)
        try await seenReach(3)
        #expect(seen.withLock { $0 } == [nil, .text("climber"), .text("photographer")])
        #expect(reads.withLock { $0 } == 5)

        // Closing the node ends the observation.
        await node.close()
        try await bounded(.seconds(120), "the observation's end") { try await collector.value }
    }

    @Test func aChatObserverSeesAMessageThatArrivesBySync() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let alice = try await makeNode(dir, "alice", network: net)
        let bob = try await makeNode(dir, "bob", network: net)
        try await syncPair(alice, bob)
        let chat = try await alice.createChat(title: "rooftops", members: [bob.identity.user]).object
        try await syncPair(alice, bob)

        var pages = alice.observe { node in try node.readableChatPage(chat, limit: 50) }.makeAsyncIterator()
        let first = try #require(try await next(&pages, "the empty chat"))
        #expect(first.messages.isEmpty)
        #expect(first.chat.title?.value == "rooftops")

        let sent = try await bob.sendMessage(chat, text: "which roof?").object
        try await syncPair(alice, bob)
        // Alice's node receives it by sync and her open chat shows it, decrypted.
        var page = try #require(try await next(&pages, "the page with Bob's message"))
        while page.messages.isEmpty { page = try #require(try await next(&pages, "the page with Bob's message")) }
        #expect(page.messages.map(\.view.id) == [sent])
        #expect(page.messages.first?.content.value?.text == "which roof?")
        await alice.close()
        await bob.close()
    }
}
