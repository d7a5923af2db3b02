#if Service
import ChorusCommands
import ChorusNode
import ChorusProjections
@testable import ChorusService
import ChorusTestSupport
import Foundation
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

/// Specs/api.md §6: one observation per distinct watched query, event ids,
/// resuming with Last-Event-ID.
@Suite("live queries", .closingNodes)
struct WatchTests {
    @Test("many watchers of few queries: each query is observed once, every watcher gets every answer, the last to leave ends it")
    func oneObservationPerQuery() async throws {
        let hub = WatchHub()
        let started = Mutex(0)
        let feeds = Mutex<[String: AsyncThrowingStream<WatchHub.Answer, any Error>.Continuation]>([:])
        func observe(_ key: String) -> @Sendable () -> AsyncThrowingStream<WatchHub.Answer, any Error> {
            {
                started.withLock { $0 += 1 }
                let (stream, continuation) = AsyncThrowingStream.makeStream(of: WatchHub.Answer.self)
                feeds.withLock { $0[key] = continuation }
                return stream
            }
        }
        var streams: [(key: String, stream: WatchMailbox)] = []
        for i in 0..<60 {
            let key = "query \(i % 3)"
            streams.append((key, hub.subscribe(key, observe: observe(key))))
        }
        // Let each observation's task start.
        for _ in 0..<200 where feeds.withLock({ $0.count }) < 3 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(started.withLock { $0 } == 3 && hub.queries == 3 && hub.watchers == 60)
        for (key, feed) in feeds.withLock({ $0 }) { feed.yield(WatchHub.Answer(status: 0, output: Data("answer of \(key)".utf8))) }
        for (key, stream) in streams {
            let answer = try #require(await stream.nextAnswer())
            #expect(String(decoding: answer.output, as: UTF8.self) == "answer of \(key)")
        }
        // A late watcher gets the latest answer at once, without a new observation.
        let late = hub.subscribe("query 1", observe: observe("query 1"))
        #expect(await late.nextAnswer().map { String(decoding: $0.output, as: UTF8.self) } == "answer of query 1")
        #expect(started.withLock { $0 } == 3)
        // Equal answers have equal ids; different ones differ.
        #expect(WatchHub.Answer(status: 0, output: Data("a".utf8)).id == WatchHub.Answer(status: 0, output: Data("a".utf8)).id)
        #expect(WatchHub.Answer(status: 0, output: Data("a".utf8)).id != WatchHub.Answer(status: 1, output: Data("a".utf8)).id)
        // A reader that is done closes its mailbox; the last one ends the observation.
        for (_, stream) in streams { stream.close() }
        late.close()
        streams.removeAll()
        for _ in 0..<200 where hub.queries > 0 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(hub.queries == 0 && hub.watchers == 0)
    }

    @Test("a watcher's mailbox keeps the newest answer, says when a heartbeat is due, and ends on end, cancellation or close")
    func mailbox() async throws {
        func answer(_ text: String) -> WatchHub.Answer { WatchHub.Answer(status: 0, output: Data(text.utf8)) }
        let closed = Mutex(0)
        let box = WatchMailbox(onClose: { closed.withLock { $0 += 1 } })
        box.put(answer("one"))
        box.put(answer("two"))
        box.beat()
        // A slow reader skips to the newest answer, then the heartbeat.
        guard case .answer(let newest) = await box.next() else { Issue.record("no answer"); return }
        #expect(String(decoding: newest.output, as: UTF8.self) == "two")
        guard case .heartbeat = await box.next() else { Issue.record("no heartbeat"); return }
        // A waiting reader is woken by a put.
        let waiting = Task { await box.nextAnswer() }
        try await Task.sleep(for: .milliseconds(20))
        box.put(answer("three"))
        #expect(await waiting.value.map { String(decoding: $0.output, as: UTF8.self) } == "three")
        // A cancelled reader gets nil, and the mailbox takes nothing more.
        let cancelled = Task { await box.next() }
        try await Task.sleep(for: .milliseconds(20))
        cancelled.cancel()
        #expect(await cancelled.value == nil)
        box.put(answer("four"))
        #expect(await box.next() == nil)
        box.close()
        box.close()
        #expect(closed.withLock { $0 } == 1)
        // An ended mailbox still hands over the answer it holds.
        let ending = WatchMailbox(onClose: {})
        ending.put(answer("last"))
        ending.end()
        #expect(await ending.nextAnswer() != nil)
        #expect(await ending.next() == nil)
    }

    @Test("a WebSocket watch sends the current answer, then each change, as {id, data}; it needs the token on TCP and a GET endpoint")
    func webSocketWatch() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("app"), network: NetworkConfig()))
        let token = "t-" + String(repeating: "ab", count: 16)
        let serving = try await node.serveAPI(tcp: ("127.0.0.1", 0), token: token)
        let port = try #require(serving.endpoints.compactMap { if case .tcp(_, let p) = $0 { p } else { nil } }.first)
        let path = "/v1/watch/ws?path=%2Fv1%2Fprofile"
        let auth = ["Authorization": "Bearer \(token)"]
        // Without the token, or with a wrong one: no upgrade (the upgrade is
        // declined, which HTTP answers 400 and closes).
        for headers in [[:], ["Authorization": "Bearer wrong"]] {
            let refused = try await offThePool { try RawWebSocket.open(port: port, path: path, headers: headers) }
            refused.socket?.close()
            #expect(refused.status == 400 && refused.socket == nil, "\(headers): \(refused.head)")
        }
        // Not a GET endpoint answering JSON: no upgrade either.
        #expect(try await offThePool { try RawWebSocket.open(port: port, path: "/v1/watch/ws?path=%2Fnothing", headers: auth) }.status == 400)
        let (status, opened, _) = try await offThePool { try RawWebSocket.open(port: port, path: path, headers: auth) }
        let socket = try #require(opened, "upgrade answered \(status)")
        defer { socket.close() }
        func next() async throws -> [String: Any] {
            let text = try #require(try await offThePool { try socket.nextText() })
            return try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "\(text)")
        }
        let first = try await next()
        #expect((first["data"] as? [String: Any])?["user"] as? String == node.identity.user.hex && (first["id"] as? String)?.count == 24)
        _ = try await node.setProfile(.bio("over a WebSocket"))
        let second = try await next()
        let fields = (second["data"] as? [String: Any])?["fields"] as? [String: Any]
        #expect(fields?["bio"] as? String == "over a WebSocket", "\(second)")
        #expect(second["id"] as? String != first["id"] as? String)
        socket.close()
        await serving.shutdown()
        await node.close()
    }

    struct Enough: Error {}

    /// The first `count` events of a watch of `/v1/profile`, while `during` runs beside it.
    static func events(
        _ api: APIClient, _ headers: [(String, String)], count: Int, during: @escaping @Sendable () async throws -> Void = {}
    ) async throws -> [String] {
        var text = ""
        let change = Task { try await during() }
        // Reading stops (by throwing) once `count` events arrived.
        do {
            _ = try await api.stream(.GET, "/v1/watch?path=%2Fv1%2Fprofile", headers: headers) { chunk in
                text += String(decoding: chunk, as: UTF8.self)
                if text.components(separatedBy: "\n\n").filter({ $0.hasPrefix("id: ") }).count >= count { throw Enough() }
            }
        } catch is Enough {}
        try await change.value
        return text.components(separatedBy: "\n\n").filter { $0.hasPrefix("id: ") }
    }

    @Test("a server-sent-events watcher writes each answer's chunk on its loop, keeps only the newest while the socket is full, and writes nothing once finished")
    func streamWatcherOnItsLoop() async throws {
        func answer(_ text: String) -> WatchHub.Answer { WatchHub.Answer(status: 0, output: Data(text.utf8)) }
        func written(_ channel: NIOAsyncTestingChannel) async throws -> [String] {
            var out: [String] = []
            while let chunk = try await channel.readOutbound(as: ByteBuffer.self) { out.append(String(buffer: chunk)) }
            return out
        }
        let (a, b, c, d) = (answer("a"), answer("b"), answer("c"), answer("d"))
        #expect(String(buffer: a.chunk) == String(a.event.readableBytes, radix: 16) + "\r\n" + String(buffer: a.event) + "\r\n")
        let channel = NIOAsyncTestingChannel()
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
        // The client holds `a`: the first answer is not sent again when it is that one.
        let watcher = try await StreamWatcher.start(on: channel, held: a.id)
        try await channel.testingEventLoop.executeInContext {
            watcher.deliver(a)
            watcher.deliver(b)
        }
        #expect(try await written(channel) == [String(buffer: b.chunk)])
        // A full socket: answers wait, only the newest is kept, no heartbeat is added; it goes once writable.
        channel.isWritable = false
        try await channel.testingEventLoop.executeInContext {
            watcher.deliver(c)
            watcher.deliver(d)
            watcher.beat()
        }
        #expect(try await written(channel).isEmpty)
        channel.isWritable = true
        try await channel.testingEventLoop.executeInContext { channel.pipeline.fireChannelWritabilityChanged() }
        #expect(try await written(channel) == [String(buffer: d.chunk)])
        try await channel.testingEventLoop.executeInContext { watcher.beat() }
        #expect(try await written(channel) == [String(buffer: StreamWatcher.heartbeatChunk)])
        // Finished: nothing more is written, and its handler left the pipeline.
        await watcher.finish()
        await watcher.done()
        try await channel.testingEventLoop.executeInContext { watcher.deliver(c) }
        #expect(try await written(channel).isEmpty)
        // A second watcher of the same kind ends when its connection closes.
        let other = try await StreamWatcher.start(on: channel, held: nil)
        try await channel.close()
        try await bounded(.seconds(120), "the watch to end on close") { await other.done() }
    }

    @Test("a server that stops ends its open watches: the response ends cleanly (chunked, its last chunk sent) and shutdown does not wait for the clients")
    func shutdownEndsOpenWatches() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("app"), network: NetworkConfig()))
        let serving = try await node.serveAPI()
        let api = APIClient(.socket(inStore: dir.store("app")))
        let firstEvent = Latched()
        let watch = Task { () -> (status: Int, headers: [(String, String)], text: String) in
            var text = ""
            let (status, headers) = try await api.stream(.GET, "/v1/watch?path=%2Fv1%2Fprofile") { chunk in
                text += String(decoding: chunk, as: UTF8.self)
                if text.contains("\n\n") { firstEvent.set() }
            }
            return (status, headers, text)
        }
        _ = try await waitFor(.seconds(120), "the first event", every: .milliseconds(20)) { firstEvent.isSet ? true : nil }
        try await bounded(.seconds(120), "the server's shutdown with a watch open") { await serving.shutdown() }
        let (status, headers, text) = try await bounded(.seconds(120), "the watch's end") { try await watch.value }
        #expect(status == 200 && text.hasPrefix("id: "), "\(status) \(text)")
        #expect(headers.contains { $0.0.lowercased() == "transfer-encoding" && $0.1.lowercased() == "chunked" }, "\(headers)")
        await node.close()
    }

    @Test("events carry ids; a watcher that reconnects with Last-Event-ID is not sent the answer it holds")
    func resumeWithLastEventID() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let node = opened(try await Node.create(at: dir.store("app"), network: NetworkConfig()))
        let serving = try await node.serveAPI()
        let api = APIClient(.socket(inStore: dir.store("app")))
        let first = try #require(try await bounded(.seconds(120), "the first event") { try await Self.events(api, [], count: 1) }.first)
        let id = String(first.split(separator: "\n")[0].dropFirst(4))
        #expect(id.count == 24 && first.contains("data: {\"user\":"), "\(first)")
        // Reconnecting with that id: the next event is the change, not the answer already held.
        let resumed = try await bounded(.seconds(120), "the resumed watch") {
            try await Self.events(api, [("Last-Event-ID", id)], count: 1) {
                try await Task.sleep(for: .milliseconds(200))
                _ = try await node.setProfile(.bio("changed while away"))
            }
        }
        #expect(resumed.count == 1 && resumed[0].contains("changed while away") && !resumed[0].hasPrefix("id: \(id)"), "\(resumed)")
        await serving.shutdown()
        await node.close()
    }
}

/// A flag one task sets and another polls.
final class Latched: Sendable {
    private let flag = Mutex(false)
    func set() { flag.withLock { $0 = true } }
    var isSet: Bool { flag.withLock { $0 } }
}
#endif
