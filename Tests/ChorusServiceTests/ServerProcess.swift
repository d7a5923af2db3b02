#if Service
import ChorusService
import ChorusTestSupport
import Foundation
import Synchronization

/// A `chorus serve` child process, stopped with SIGTERM.
final class ServerProcess: Sendable {
    let process: ChildProcess
    private let log: LogBuffer
    let syncPort: Int
    let apiPort: Int?

    /// Starts `chorus serve` and waits for its listening lines on a thread of
    /// its own: a test that blocked a cooperative thread for a server's
    /// start (seconds on a loaded machine) stalled every other test's async
    /// work, syncs included.
    static func start(chorus: String, store: String, apiListen: Bool = false, extra: [String] = []) async throws -> ServerProcess {
        try await offThePool { try ServerProcess(chorus: chorus, store: store, apiListen: apiListen, extra: extra) }
    }

    private init(chorus: String, store: String, apiListen: Bool = false, extra: [String] = []) throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: chorus)
        process.arguments = ["serve", "--store", store, "--listen", "127.0.0.1:0"] + (apiListen ? ["--api-listen", "127.0.0.1:0"] : []) + extra
        var env = ProcessInfo.processInfo.environment
        env["CHORUS_STORE"] = nil
        process.environment = env
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        self.process = process
        let log = LogBuffer()
        self.log = log
        Thread {
            // `availableData`: `read(upToCount:)` waits for the whole count.
            while case let chunk = err.fileHandleForReading.availableData, !chunk.isEmpty {
                log.append(String(decoding: chunk, as: UTF8.self))
            }
        }.start()
        let socket = APIPaths.socket(inStore: store)
        // Bounded wait for the listening lines.
        let deadline = Date().addingTimeInterval(30)
        func port(after marker: String) -> Int? {
            let text = log.text
            guard let range = text.range(of: marker) else { return nil }
            // Only a whole number: the log may have arrived up to the middle of it.
            let rest = text[range.upperBound...]
            let digits = rest.prefix { $0.isNumber }
            guard !digits.isEmpty, digits.endIndex < rest.endIndex else { return nil }
            return Int(digits)
        }
        while Date() < deadline {
            let text = log.text
            // The socket's own line: the two API listeners start concurrently,
            // so the TCP line may come first, before the socket exists.
            if let sync = port(after: "listening on 127.0.0.1:"), text.contains("local API on \(socket)"),
                !apiListen || port(after: "local API on 127.0.0.1:") != nil
            {
                syncPort = sync
                apiPort = apiListen ? port(after: "local API on 127.0.0.1:") : nil
                return
            }
            guard process.isRunning else { break }
            usleep(20_000)
        }
        process.terminate()
        throw TestFailure("chorus serve did not start: \(log.text)")
    }

    var output: String { log.text }

    /// SIGTERM, then a bounded wait for a clean exit (polling: no
    /// cooperative thread is held); returns its status, nil when it had to
    /// be killed.
    @discardableResult
    func stop(within limit: Duration = .seconds(120)) async -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        process.terminate()
        return await process.exit(within: limit) ? process.terminationStatus : nil
    }

    /// SIGKILL, at once: the cleanup of a test that did not get to `stop()`.
    func kill() { process.killAndReapAside() }
}

final class LogBuffer: Sendable {
    private let state = Mutex("")
    func append(_ s: String) { state.withLock { $0 += s } }
    var text: String { state.withLock { $0 } }
}
#endif
