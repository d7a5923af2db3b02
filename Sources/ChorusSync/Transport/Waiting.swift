import Synchronization

/// Hands elements one at a time from one producer to one consumer: `put`
/// returns once the consumer took the element (so the producer never runs
/// more than one element ahead: back-pressure), `take` waits for the next
/// one, and `finish` ends it, waking both. An element put before the end is
/// still taken after it.
final class Handoff<Element: Sendable, Failure: Error>: Sendable {
    private struct State {
        var pending: Element?
        var consumer: CheckedContinuation<Element?, any Error>?
        var producer: CheckedContinuation<Void, Never>?
        var end: Result<Void, Failure>?
    }

    private let state = Mutex(State())
    /// Thrown by a `take` while another `take` waits.
    private let busy: Failure

    init(busy: Failure) { self.busy = busy }

    /// Whether a consumer waits in `take`, and whether an element waits to be taken.
    var waiting: (consumer: Bool, element: Bool) { state.withLock { ($0.consumer != nil, $0.pending != nil) } }

    /// Gives `element` to the consumer and waits until it is taken (or the
    /// handoff ends: then it is dropped unless it was taken).
    func put(_ element: Element) async {
        let (taken, consumer) = state.withLock { s -> (Bool, CheckedContinuation<Element?, any Error>?) in
            if s.end != nil { return (true, nil) }
            guard let waiting = s.consumer else { return (false, nil) }
            s.consumer = nil
            return (true, waiting)
        }
        if taken {
            consumer?.resume(returning: element)
            return
        }
        await withCheckedContinuation { (producer: CheckedContinuation<Void, Never>) in
            let consumer = state.withLock { s -> CheckedContinuation<Element?, any Error>?? in
                if s.end != nil { return .some(nil) }
                if let waiting = s.consumer {
                    s.consumer = nil
                    return .some(waiting)
                }
                s.pending = element
                s.producer = producer
                return nil
            }
            guard let consumer else { return }
            consumer?.resume(returning: element)
            producer.resume()
        }
    }

    /// What a `take` finds ready: an element (and the producer to wake), or the end.
    private enum Ready {
        case element(Element, CheckedContinuation<Void, Never>?)
        case ended(Result<Void, Failure>)

        func answer() throws -> Element? {
            switch self {
            case .element(let element, let producer):
                producer?.resume()
                return element
            case .ended(.success): return nil
            case .ended(.failure(let error)): throw error
            }
        }
    }

    private static func ready(_ s: inout State) -> Ready? {
        if let element = s.pending {
            s.pending = nil
            defer { s.producer = nil }
            return .element(element, s.producer)
        }
        return s.end.map(Ready.ended)
    }

    /// The next element; nil once finished with success, the failure once
    /// finished with one.
    func take() async throws -> Element? {
        if let r = try state.withLock({ s -> Ready? in
            if let r = Self.ready(&s) { return r }
            if s.consumer != nil { throw busy }
            return nil
        }) {
            return try r.answer()
        }
        return try await withCheckedThrowingContinuation { (consumer: CheckedContinuation<Element?, any Error>) in
            let outcome = state.withLock { s -> Result<Ready, Failure>? in
                if let r = Self.ready(&s) { return .success(r) }
                if s.consumer != nil { return .failure(busy) }
                s.consumer = consumer
                return nil
            }
            switch outcome {
            case nil: break
            case .success(let r): consumer.resume(with: Result { try r.answer() })
            case .failure(let error): consumer.resume(throwing: error)
            }
        }
    }

    /// Ends the handoff with `result` (the first call decides) and wakes a
    /// waiting consumer and producer.
    func finish(_ result: Result<Void, Failure>) {
        let (consumer, producer, end) = state.withLock { s in
            if s.end == nil { s.end = result }
            defer {
                s.consumer = nil
                s.producer = nil
            }
            return (s.consumer, s.producer, s.end ?? result)
        }
        switch end {
        case .success: consumer?.resume(returning: nil)
        case .failure(let error): consumer?.resume(throwing: error)
        }
        producer?.resume()
    }
}

/// Lets one sender at a time through, in the order they came, so that the
/// messages of one frame are never interleaved with another's. Once closed,
/// everyone goes through at once (to find the connection closed).
final class SendGate: Sendable {
    private struct State {
        var busy = false
        var closed = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    init() {}

    /// Senders waiting for their turn.
    var waiters: Int { state.withLock { $0.waiters.count } }

    /// Takes the turn when it is free (or the gate closed); false when held.
    private static func enter(_ s: inout State) -> Bool {
        guard s.busy, !s.closed else {
            s.busy = true
            return true
        }
        return false
    }

    /// Waits for its turn.
    func acquire() async {
        if state.withLock({ Self.enter(&$0) }) { return }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s in
                if Self.enter(&s) { return true }
                s.waiters.append(waiter)
                return false
            }
            if now { waiter.resume() }
        }
    }

    /// Takes the turn only if nobody holds it.
    func tryAcquire() -> Bool {
        state.withLock { s in
            guard !s.busy, !s.closed else { return false }
            s.busy = true
            return true
        }
    }

    /// Gives the turn to the next waiter, in order.
    func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard !s.waiters.isEmpty, !s.closed else {
                s.busy = false
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }

    /// Lets every waiter through now, and every later one at once.
    func close() {
        let waiters = state.withLock { s in
            s.closed = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

/// Messages for one reader, in order: `push` hands a message to the waiting
/// reader or keeps it; `next` takes the oldest or waits; `finish` ends the
/// waiting (the reader gets what is left, then nil).
final class AsyncQueue<Element: Sendable>: Sendable {
    private struct State {
        var items: [Element] = []
        var head = 0
        var reader: CheckedContinuation<Element?, Never>?
        var finished = false

        mutating func take() -> Element? {
            guard head < items.count else { return nil }
            defer {
                head += 1
                if head == items.count {
                    items.removeAll(keepingCapacity: true)
                    head = 0
                }
            }
            return items[head]
        }
    }

    private let state = Mutex(State())

    init() {}

    /// Whether `finish` was called.
    var isFinished: Bool { state.withLock { $0.finished } }
    /// Whether no message waits.
    var isEmpty: Bool { state.withLock { $0.head == $0.items.count } }
    /// Whether the reader waits in `next`.
    var hasReader: Bool { state.withLock { $0.reader != nil } }

    /// Adds `element` after the others (after `finish` too: the reader still takes it before its nil).
    func push(_ element: Element) {
        let reader = state.withLock { s -> CheckedContinuation<Element?, Never>? in
            if let r = s.reader {
                s.reader = nil
                return r
            }
            s.items.append(element)
            return nil
        }
        reader?.resume(returning: element)
    }

    /// Puts `elements` back before the others, in their order (a reader
    /// that set some aside hands them back).
    func pushFront(_ elements: [Element]) {
        guard !elements.isEmpty else { return }
        state.withLock { s in
            s.items = elements + s.items[s.head...]
            s.head = 0
        }
    }

    /// The oldest message; nil once finished and empty.
    func next() async -> Element? {
        if let ready = state.withLock({ s -> Element?? in
            if let e = s.take() { return .some(e) }
            return s.finished ? .some(nil) : nil
        }) {
            return ready
        }
        return await withCheckedContinuation { (reader: CheckedContinuation<Element?, Never>) in
            let ready = state.withLock { s -> Element?? in
                if let e = s.take() { return .some(e) }
                if s.finished { return .some(nil) }
                s.reader = reader
                return nil
            }
            if let ready { reader.resume(returning: ready) }
        }
    }

    /// Ends the queue; a waiting reader gets nil.
    func finish() {
        let reader = state.withLock { s -> CheckedContinuation<Element?, Never>? in
            s.finished = true
            defer { s.reader = nil }
            return s.reader
        }
        reader?.resume(returning: nil)
    }
}

/// A result that is settled once (the first `settle` wins): whoever waits
/// gets it when it is settled, and everyone after.
final class Outcome<Value: Sendable, Failure: Error>: Sendable {
    private struct State {
        var result: Result<Value, Failure>?
        var waiters: [CheckedContinuation<Result<Value, Failure>, Never>] = []
    }
    private let state = Mutex(State())

    init() {}

    /// The result, once settled.
    var result: Result<Value, Failure>? { state.withLock { $0.result } }

    /// Settles it with `result` unless it is settled already; returns whether this call did.
    @discardableResult
    func settle(_ result: Result<Value, Failure>) -> Bool {
        let waiters: [CheckedContinuation<Result<Value, Failure>, Never>]? = state.withLock { s in
            guard s.result == nil else { return nil }
            s.result = result
            defer { s.waiters = [] }
            return s.waiters
        }
        guard let waiters else { return false }
        for w in waiters { w.resume(returning: result) }
        return true
    }

    /// The value once settled, or its failure thrown.
    func value() async throws(Failure) -> Value {
        let settled = await withCheckedContinuation { (waiter: CheckedContinuation<Result<Value, Failure>, Never>) in
            let now: Result<Value, Failure>? = state.withLock { s in
                if let result = s.result { return result }
                s.waiters.append(waiter)
                return nil
            }
            if let now { waiter.resume(returning: now) }
        }
        return try settled.get()
    }
}

/// Opens once: whoever waits is let through when it opens, and everyone after.
final class Latch: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    init() {}

    var isOpen: Bool { state.withLock { $0.open } }

    func open() {
        let waiters = state.withLock { s in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s in
                if s.open { return true }
                s.waiters.append(waiter)
                return false
            }
            if now { waiter.resume() }
        }
    }
}

/// Wakes one waiter when what it waits for may have changed; the waiter
/// checks again. A wake with nobody waiting is kept for the next wait, so
/// none is lost between a check and the wait. Once cancelled, every wait
/// throws `CancellationError`.
final class Wakeup: Sendable {
    private struct State {
        var waiter: CheckedContinuation<Void, any Error>?
        var pending = false
        var cancelled = false
    }

    private let state = Mutex(State())

    init() {}

    /// Whether someone waits now.
    var hasWaiter: Bool { state.withLock { $0.waiter != nil } }

    func wake() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, any Error>? in
            guard let w = s.waiter else {
                s.pending = true
                return nil
            }
            s.waiter = nil
            return w
        }
        waiter?.resume()
    }

    func cancel() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, any Error>? in
            s.cancelled = true
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(throwing: CancellationError())
    }

    func wait() async throws {
        try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, any Error>) in
            let outcome = state.withLock { s -> Result<Void, any Error>? in
                if s.cancelled { return .failure(CancellationError()) }
                if s.pending {
                    s.pending = false
                    return .success(())
                }
                s.waiter = waiter
                return nil
            }
            if let outcome { waiter.resume(with: outcome) }
        }
    }
}
