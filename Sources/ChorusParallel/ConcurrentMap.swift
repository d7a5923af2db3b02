/// Runs `transform` on every item as child tasks, at most `limit` at once,
/// and returns the results in input order. For I/O-bound work that must
/// not open unboundedly many connections at once (a sync with many relays,
/// Specs/sync.md §9): a new item starts when one finishes.
public func concurrentMap<In: Sendable, Out: Sendable>(
    _ items: [In], limit: Int, _ transform: @escaping @Sendable (In) async -> Out
) async -> [Out] {
    let limit = max(1, limit)
    return await withTaskGroup(of: (Int, Out).self) { group in
        var next = 0
        func start() {
            let i = next
            let item = items[i]
            group.addTask { (i, await transform(item)) }
            next += 1
        }
        while next < min(limit, items.count) { start() }
        var results: [Out?] = Array(repeating: nil, count: items.count)
        while let (i, out) = await group.next() {
            results[i] = out
            if next < items.count { start() }
        }
        return results.compactMap { $0 }
    }
}
