#if Service
import ChorusCrypto
import Foundation
import NIOCore
import Synchronization

/// One observation per distinct watched query, shared by all its watchers
/// (Specs/api.md §6): a commit reads each distinct query once, whatever the
/// number of watchers, and each watcher gets the newest answer (a slow
/// reader skips answers, never falls behind).
final class WatchHub: Sendable {
    /// One answer of a watched query: its exit status (0 for an answer, 1
    /// for an error), its JSON, and its id, a hash of both, so a client that
    /// resumes with `Last-Event-ID` is not sent the answer it holds.
    struct Answer: Equatable, Sendable {
        let status: Int32
        let output: Data
        let id: String
        /// The server-sent event, made once for every watcher: one `data:`
        /// line (an answer is one line of JSON), named `error` for an error.
        let event: ByteBuffer

        init(status: Int32, output: Data) {
            self.status = status
            self.output = output
            id = String(Blake2b.hash256([UInt8(truncatingIfNeeded: status)] + Array(output)).hex.prefix(24))
            var event = ByteBuffer()
            event.reserveCapacity(output.count + 64)
            event.writeString("id: \(id)\n" + (status == 0 ? "" : "event: error\n") + "data: ")
            event.writeBytes(output)
            event.writeString("\n\n")
            self.event = event
            chunk = Self.chunk(event)
            message = #"{"id":"\#(id)",\#(status == 0 ? #""data""# : #""error""#):"# + String(decoding: output, as: UTF8.self) + "}"
        }

        /// `event` as one HTTP/1.1 chunk (RFC 9112 §7.1), framed once for
        /// every watcher: `StreamWatcher` writes it beneath the HTTP encoder.
        let chunk: ByteBuffer

        static func chunk(_ bytes: ByteBuffer) -> ByteBuffer {
            var chunk = ByteBuffer()
            chunk.reserveCapacity(bytes.readableBytes + 12)
            chunk.writeString(String(bytes.readableBytes, radix: 16) + "\r\n")
            chunk.writeImmutableBuffer(bytes)
            chunk.writeString("\r\n")
            return chunk
        }

        /// The WebSocket message, made once for every watcher:
        /// `{"id": ID, "data": ANSWER}`, or `"error"` for an error.
        let message: String

        static func == (a: Answer, b: Answer) -> Bool { a.status == b.status && a.output == b.output }
    }

    private struct Entry {
        /// Which observation this is, so that one that ended does not touch its successor under the same key.
        let generation: Int
        var watchers: [Int: WatchMailbox] = [:]
        /// Server-sent-events watchers, written to on their connections' loops.
        var streams: [Int: StreamWatcher] = [:]
        var latest: Answer?
        var task: Task<Void, Never>?
    }

    private let entries = Mutex<[String: Entry]>([:])
    private let nextWatcher = Atomic<Int>(0)
    /// How often every watcher is sent a heartbeat (writing one is how a
    /// watcher that went away is noticed), and the one task that does it.
    let heartbeat: Duration
    private let beating = Mutex<Task<Void, Never>?>(nil)

    init(heartbeat: Duration = .seconds(15)) { self.heartbeat = heartbeat }

    deinit { beating.withLock { $0?.cancel() } }

    /// Distinct queries observed now (for metrics and tests).
    var queries: Int { entries.withLock { $0.count } }
    /// Watchers now.
    var watchers: Int { entries.withLock { $0.values.reduce(0) { $0 + $1.watchers.count + $1.streams.count } } }

    /// The answers of the query `key`, in a mailbox its reader closes when
    /// done: its latest answer at once when another watcher observes it
    /// already, then each new one, and a heartbeat now and then. `observe`
    /// starts the query's observation when it has no watcher yet; it is
    /// cancelled when its last watcher leaves.
    func subscribe(_ key: String, observe: @escaping @Sendable () -> AsyncThrowingStream<Answer, any Error>) -> WatchMailbox {
        let id = nextWatcher.wrappingAdd(1, ordering: .relaxed).oldValue
        let mailbox = WatchMailbox(onClose: { [weak self] in self?.leave(key, id) })
        join(key, id, observe: observe) { entry in
            entry.watchers[id] = mailbox
            if let latest = entry.latest { mailbox.put(latest) }
        }
        return mailbox
    }

    /// `stream` watches the query `key` until `leave(key, id)` with the id
    /// returned: as `subscribe`, its answers written on its loop.
    func subscribe(_ key: String, stream: StreamWatcher, observe: @escaping @Sendable () -> AsyncThrowingStream<Answer, any Error>) -> Int {
        let id = nextWatcher.wrappingAdd(1, ordering: .relaxed).oldValue
        join(key, id, observe: observe) { entry in
            entry.streams[id] = stream
            if let latest = entry.latest { stream.loop.execute { stream.deliver(latest) } }
        }
        return id
    }

    private func join(
        _ key: String, _ id: Int, observe: @escaping @Sendable () -> AsyncThrowingStream<Answer, any Error>, add: (inout Entry) -> Void
    ) {
        let (isNew, generation) = entries.withLock { all in
            let isNew = all[key] == nil
            var entry = all[key] ?? Entry(generation: id)
            add(&entry)
            all[key] = entry
            return (isNew, entry.generation)
        }
        startBeating()
        if isNew {
            let task = Task { [weak self] in
                do {
                    for try await answer in observe() { self?.publish(key, generation, answer) }
                } catch {}
                self?.finish(key, generation)
            }
            let kept = entries.withLock { all in
                guard all[key]?.generation == generation, all[key]?.task == nil else { return false }
                all[key]?.task = task
                return true
            }
            // Every watcher left already, or another observation serves the key.
            if !kept { task.cancel() }
        }
    }

    private func startBeating() {
        beating.withLock { task in
            guard task == nil else { return }
            let interval = heartbeat
            task = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    guard let self else { return }
                    let (mailboxes, streams) = self.entries.withLock { all in
                        (all.values.flatMap(\.watchers.values), all.values.flatMap(\.streams.values))
                    }
                    for mailbox in mailboxes { mailbox.beat() }
                    Self.onTheirLoops(streams) { $0.beat() }
                }
            }
        }
    }

    private func publish(_ key: String, _ generation: Int, _ answer: Answer) {
        let (watchers, streams) = entries.withLock { all -> ([WatchMailbox], [StreamWatcher]) in
            guard all[key]?.generation == generation else { return ([], []) }
            all[key]?.latest = answer
            return (Array(all[key]?.watchers.values ?? [:].values), Array(all[key]?.streams.values ?? [:].values))
        }
        Self.onTheirLoops(streams) { $0.deliver(answer) }
        for watcher in watchers { watcher.put(answer) }
    }

    /// `body` for each stream on its own loop, one hop to each loop for all of its streams.
    private static func onTheirLoops(_ streams: [StreamWatcher], _ body: @escaping @Sendable (StreamWatcher) -> Void) {
        guard !streams.isEmpty else { return }
        for group in Dictionary(grouping: streams, by: { ObjectIdentifier($0.loop) }).values {
            group[0].loop.execute { for stream in group { body(stream) } }
        }
    }

    /// The watcher `id` of `key` is done; the query's observation stops with its last watcher.
    func leave(_ key: String, _ id: Int) {
        let task = entries.withLock { all -> Task<Void, Never>? in
            all[key]?.watchers[id] = nil
            all[key]?.streams[id] = nil
            guard let entry = all[key], entry.watchers.isEmpty, entry.streams.isEmpty else { return nil }
            all[key] = nil
            return entry.task
        }
        task?.cancel()
    }

    /// The observation ended (the node closed): its watchers end too.
    private func finish(_ key: String, _ generation: Int) {
        let (watchers, streams) = entries.withLock { all -> ([WatchMailbox], [StreamWatcher]) in
            guard all[key]?.generation == generation else { return ([], []) }
            let entry = all.removeValue(forKey: key)
            return (Array(entry?.watchers.values ?? [:].values), Array(entry?.streams.values ?? [:].values))
        }
        for watcher in watchers { watcher.end() }
        for stream in streams { stream.end() }
    }
}

/// What one watcher has not sent yet (Specs/api.md §6): the newest answer
/// (a slow reader skips answers, never falls behind), whether a heartbeat
/// is due, and whether the query ended. Read by one task, its response,
/// which a commit wakes directly: no task in between.
final class WatchMailbox: Sendable {
    enum Item: Sendable {
        case answer(WatchHub.Answer)
        case heartbeat
    }

    private struct State {
        var answer: WatchHub.Answer?
        var beat = false
        var ended = false
        var reader: CheckedContinuation<Item?, Never>?
    }

    private let state = Mutex(State())
    private let onClose: Mutex<(@Sendable () -> Void)?>

    init(onClose: @escaping @Sendable () -> Void) { self.onClose = Mutex(onClose) }

    /// A new answer: replaces one not yet taken.
    func put(_ answer: WatchHub.Answer) { offer(.answer(answer)) { $0.answer = answer } }

    /// A heartbeat is due.
    func beat() { offer(.heartbeat) { $0.beat = true } }

    /// Hands `item` to a waiting reader, or keeps it (`keep`) for the next read.
    private func offer(_ item: Item, keep: (inout State) -> Void) {
        let reader = state.withLock { s -> CheckedContinuation<Item?, Never>? in
            guard !s.ended else { return nil }
            if let r = s.reader {
                s.reader = nil
                return r
            }
            keep(&s)
            return nil
        }
        reader?.resume(returning: item)
    }

    /// No more answers: the reader gets what is left, then nil.
    func end() {
        let reader = state.withLock { s -> CheckedContinuation<Item?, Never>? in
            s.ended = true
            defer { s.reader = nil }
            return s.reader
        }
        reader?.resume(returning: nil)
    }

    /// The reader is done: ends the mailbox and leaves the query.
    func close() {
        end()
        onClose.withLock { f in
            f?()
            f = nil
        }
    }

    private func take(_ s: inout State) -> Item?? {
        if let a = s.answer {
            s.answer = nil
            return .some(.answer(a))
        }
        if s.beat {
            s.beat = false
            return .some(.heartbeat)
        }
        return s.ended ? .some(nil) : nil
    }

    /// The next answer or heartbeat; nil once ended or when the reader's task is cancelled.
    func next() async -> Item? {
        if let ready = state.withLock({ take(&$0) }) { return ready }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Item?, Never>) in
                let ready = state.withLock { s -> Item?? in
                    if let ready = take(&s) { return ready }
                    if Task.isCancelled { return .some(nil) }
                    s.reader = c
                    return nil
                }
                if let ready { c.resume(returning: ready) }
            }
        } onCancel: {
            end()
        }
    }

    /// The next answer, skipping heartbeats; nil once ended.
    func nextAnswer() async -> WatchHub.Answer? {
        while let item = await next() { if case .answer(let a) = item { return a } }
        return nil
    }
}
#endif
