import Dispatch

/// Applies `transform` to every item on all cores and returns the results
/// in input order. For CPU-bound, independent work (signature checks,
/// decoding, signing); the items are split into chunks so each core takes
/// a run of them rather than one at a time.
public func parallelMap<In: Sendable, Out>(
    _ items: [In], chunk: Int = 32, _ transform: @Sendable (In) -> Out
) -> [Out] {
    let count = items.count
    let chunk = max(1, chunk)
    if count <= chunk { return items.map(transform) }
    return [Out](unsafeUninitializedCapacity: count) { buffer, initialized in
        guard let base = buffer.baseAddress else { return }
        let slots = Slots(base: base)
        DispatchQueue.concurrentPerform(iterations: (count + chunk - 1) / chunk) { c in
            for i in (c * chunk)..<min(count, (c + 1) * chunk) {
                (slots.base + i).initialize(to: transform(items[i]))
            }
        }
        initialized = count
    }
}

/// The output buffer, shared by the iterations: each writes only its own
/// slots, so no two threads touch the same memory.
private struct Slots<T>: @unchecked Sendable {
    let base: UnsafeMutablePointer<T>
}
