import ChorusNode
import Foundation
import Synchronization
import Testing

/// What a test opened (nodes, served relays, servers), closed in reverse
/// order when it ends: a test that fails before its own `close()` calls must
/// not leave stores open, listeners bound or writer threads running for the
/// tests after it. Closing is idempotent, so tests that close what they open
/// lose nothing.
public final class OpenedInTest: Sendable {
    @TaskLocal public static var current: OpenedInTest?
    private let closers = Mutex<[@Sendable () async -> Void]>([])

    public init() {}

    public func add(_ close: @escaping @Sendable () async -> Void) { closers.withLock { $0.append(close) } }

    public func closeAll() async {
        for close in closers.withLock({ $0 }).reversed() { await close() }
    }
}

/// Registers `thing` to be closed by `close` when the test ends, however it
/// ends (under `.closingNodes`; outside it, nothing is registered), and
/// returns it.
@discardableResult
public func opened<T: Sendable>(_ thing: T, closing close: @escaping @Sendable (T) async -> Void) -> T {
    OpenedInTest.current?.add { await close(thing) }
    return thing
}

/// The trait that closes what each test of a suite opened (`opened`), when
/// the test ends, whether it passed, failed or threw.
public struct ClosingNodes: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        PoolStallWatch.started
        let opened = OpenedInTest()
        do {
            try await OpenedInTest.$current.withValue(opened) { try await function() }
        } catch {
            await opened.closeAll()
            throw error
        }
        await opened.closeAll()
    }
}

extension Trait where Self == ClosingNodes {
    /// Closes every node, relay and server a test opens when it ends.
    public static var closingNodes: Self { ClosingNodes() }
}

/// Registers `node` to be closed when the test ends, however it ends
/// (`.closingNodes`), and returns it.
@discardableResult
public func opened(_ node: Node) -> Node { opened(node) { await $0.close() } }

/// Says on standard error when a new task could not start for seconds: the
/// cooperative pool's threads (on 2 cores, two) were blocked or had that
/// much work queued ahead, so every test's bounded waits stretched by as
/// much, and a failure then shows far from its cause. Started by
/// `.closingNodes`; silent otherwise.
enum PoolStallWatch {
    static let started: Void = {
        let thread = Thread {
            let threshold = Duration.seconds(5)
            while true {
                let ran = RanFlag()
                let sent = ContinuousClock.now
                Task { ran.set() }
                var reported = false
                while !ran.isSet {
                    Thread.sleep(forTimeInterval: 0.1)
                    let waited = ContinuousClock.now - sent
                    if !reported, waited > threshold {
                        reported = true
                        FileHandle.standardError.write(Data("pool stall: a new task could not start for \(threshold) (since \(Date().addingTimeInterval(-Double(threshold.components.seconds)))): the cooperative pool is blocked or saturated\n".utf8))
                    }
                }
                if reported {
                    FileHandle.standardError.write(Data("pool stall: ended after \(ContinuousClock.now - sent) (\(Date()))\n".utf8))
                }
                Thread.sleep(forTimeInterval: 0.25)
            }
        }
        thread.name = "pool-stall-watch"
        thread.start()
    }()

    private final class RanFlag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .releasing) }
        var isSet: Bool { value.load(ordering: .acquiring) }
    }
}
