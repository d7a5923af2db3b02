import Chorus
import Foundation
import Synchronization
import Testing

/// Live sync with a life cycle: states, reconnection with backoff.
@Suite("Live sync with a life cycle")
struct LiveSyncTests {
    @Test("the backoff doubles up to its maximum and jitters below each wait")
    func backoff() {
        let b = Backoff(initial: .milliseconds(100), maximum: .seconds(1), multiplier: 2, jitter: 0.5)
        #expect(b.delay(afterFailure: 1, random: 0) == .milliseconds(100))
        #expect(b.delay(afterFailure: 2, random: 0) == .milliseconds(200))
        #expect(b.delay(afterFailure: 3, random: 0) == .milliseconds(400))
        #expect(b.delay(afterFailure: 9, random: 0) == .seconds(1))
        #expect(b.delay(afterFailure: 2, random: 0.5) == .milliseconds(150))
        #expect(b.delay(afterFailure: 2, random: 0.999) > .milliseconds(100))
    }

    @Test("a live sync goes connecting → syncing → live, waits when its relay goes away, and is live again when it returns")
    func reconnects() async throws {
        let world = try await ObservationTests.World.make()
        let (alice, bob) = (world.alice, world.bob)
        var serving = try await bob.serve(port: 0, options: .patient(live: true))
        let port = serving.port
        let seen = StatesSeen()
        let sync = alice.liveSync(
            with: "127.0.0.1", port: port, options: .patient(live: true), backoff: Backoff(initial: .milliseconds(20), maximum: .milliseconds(200)))
        let watcher = Task { for await state in sync.states { seen.add(state) } }
        try await seen.wait("live") { $0.last == .live }
        #expect(Array(seen.all.prefix(3)) == [.connecting(attempt: 1), .syncing, .live])

        // Bob's new message reaches Alice over the live connection.
        let chat = try await bob.createChat(title: "live", members: [alice.identity.user]).object
        _ = try await bob.sendMessage(chat, text: "first")
        try await seen.until("the first message") { (try? alice.readableChatPage(chat).messages.count) == 1 }

        // Bob stops serving: Alice waits, retrying, with the reason.
        await serving.shutdown()
        try await seen.wait("waiting") { states in
            states.contains { if case .waiting(_, let reason) = $0 { reason.code.isEmpty == false } else { false } }
        }
        #expect(sync.state != .live)
        _ = try await bob.sendMessage(chat, text: "second")

        // Bob serves again on the same port: Alice is live again and catches up.
        serving = try await bob.serve(port: port, options: .patient(live: true))
        try await seen.until("the second message") { (try? alice.readableChatPage(chat).messages.count) == 2 }
        try await seen.wait("live again") { $0.last == .live }
        await sync.stop()
        #expect(sync.state == .stopped)
        await watcher.value
        #expect(seen.all.last == .stopped)
        await serving.shutdown()
        await world.close()
    }
}

/// A transport of the app's own (`Node.sync(over:)`).
@Suite("Sync over a custom transport")
struct CustomTransportTests {
    @Test("two nodes sync both ways over an in-memory pair of FrameTransports")
    func memoryPair() async throws {
        let world = try await ObservationTests.World.make()
        let (alice, bob) = (world.alice, world.bob)
        try await alice.setProfile(.name("Alice"))
        try await bob.setProfile(.name("Bob"))
        // Each end is held by one node; its peer is the other's device key.
        let (aliceEnd, bobEnd) = MemoryTransport.pair(alice.identity.device.raw, bob.identity.device.raw)
        async let fromBob = alice.sync(over: aliceEnd)
        async let fromAlice = bob.sync(over: bobEnd)
        let (a, b) = try await (fromBob, fromAlice)
        #expect(a.complete && b.complete)
        #expect(try alice.profile(of: bob.identity.user).name == "Bob")
        #expect(try bob.profile(of: alice.identity.user).name == "Alice")
        await world.close()
    }
}

/// The states a live sync went through, shared with the test.
final class StatesSeen: Sendable {
    private let states = Mutex<[LiveSyncState]>([])
    func add(_ s: LiveSyncState) { states.withLock { $0.append(s) } }
    var all: [LiveSyncState] { states.withLock { $0 } }

    /// Waits (bounded) until the states seen satisfy `condition`.
    func wait(_ what: String, _ condition: @escaping @Sendable ([LiveSyncState]) -> Bool) async throws {
        try await until(what) { condition(self.all) }
    }

    /// Waits (bounded, 30 s) until `condition` holds.
    func until(_ what: String, _ condition: @escaping @Sendable () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting for \(what); states: \(all)")
                return
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

extension SyncOptions {
    /// The defaults with a hello limit a loaded machine does not reach: with
    /// the whole suite on two cores, a session's task can start seconds late.
    static func patient(live: Bool) -> SyncOptions {
        var options = SyncOptions(live: live)
        options.helloTimeout = .seconds(120)
        return options
    }
}
