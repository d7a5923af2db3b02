#if Service
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// Runs `body(i)` for i in 0..<count on threads of their own (the commands
/// block: the cooperative pool has only a few threads) and waits for all.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        let group = DispatchGroup()
        for i in 0..<count {
            group.enter()
            Thread {
                body(i)
                group.leave()
            }.start()
        }
        group.notify(queue: .global()) { done.resume() }
    }
}

@Suite("concurrent command-line writers")
struct ConcurrentWriterTests {
    static let writers = 8
    static let mutationsEach = 100

    /// Events in the store, from `export --json`.
    static func eventCount(_ chorus: String, _ store: String, _ dir: TempDir) async throws -> Int {
        let r = try await runCommand(chorus, ["export", dir.store("count.cbor"), "--json", "--store", store])
        let object = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any]
        return try #require(object?["events"] as? Int)
    }

    /// Eight writers × 100 mutations, all at once: every command exits 0 and
    /// the log holds exactly 800 new events.
    func writeConcurrently(served: Bool) async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        let store = dir.store("s")
        #expect(try await runCommand(chorus, ["init", "--store", store]).status == 0)
        let server = served ? try await ServerProcess.start(chorus: chorus, store: store) : nil
        defer { server?.kill() }
        let before = try await Self.eventCount(chorus, store, dir)
        let failures = FailureList()
        await onThreads(Self.writers) { writer in
            for i in 0..<Self.mutationsEach {
                let arguments =
                    i % 2 == 0
                    ? ["profile", "set", "bio", "writer \(writer) edit \(i)", "--store", store]
                    // A user of its own each time: a second follow of the same one is refused (already_added).
                    : ["follow", String(format: "%02x%02x", writer + 1, i) + String(repeating: "5a", count: 30), "--store", store]
                do {
                    let r = try runCommandSync(chorus, arguments)
                    if r.status != 0 { failures.add("writer \(writer) #\(i): exit \(r.status): \(r.stderr)") }
                } catch {
                    failures.add("writer \(writer) #\(i): \(error)")
                }
            }
        }
        #expect(failures.all.isEmpty, "\(failures.all.prefix(5))")
        #expect(try await Self.eventCount(chorus, store, dir) == before + Self.writers * Self.mutationsEach)
        if let server { #expect(await server.stop() == 0) }
    }

    @Test("8 writers × 100 mutations on one store with no server: each waits its turn, none fails")
    func withoutServer() async throws { try await writeConcurrently(served: false) }

    @Test("8 writers × 100 mutations on one store while `chorus serve` runs: all go through it")
    func withServer() async throws { try await writeConcurrently(served: true) }
}

final class FailureList: Sendable {
    private let state = Mutex<[String]>([])
    func add(_ s: String) { state.withLock { $0.append(s) } }
    var all: [String] { state.withLock { $0 } }
}
#endif
