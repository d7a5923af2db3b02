import ChorusParallel
import Synchronization
import Testing

@Suite("Bounded concurrent map (ChorusParallel)")
struct ConcurrentMapTests {
    @Test("every item runs, results in input order, never more than the limit at once", arguments: [1, 2, 8, 100])
    func bounded(limit: Int) async {
        let running = Mutex((now: 0, most: 0))
        let items = Array(0..<40)
        let out = await concurrentMap(items, limit: limit) { i in
            running.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
            // Yield so that other items get the chance to start while this one runs.
            for _ in 0..<(i % 4 + 1) { await Task.yield() }
            running.withLock { $0.now -= 1 }
            return i * 2
        }
        #expect(out == items.map { $0 * 2 })
        let most = running.withLock { $0.most }
        #expect(most >= 1 && most <= min(limit, items.count))
        #expect(running.withLock { $0.now } == 0)
    }

    @Test("no items, no work")
    func empty() async {
        let out = await concurrentMap([Int](), limit: 3) { $0 }
        #expect(out.isEmpty)
    }
}
