#if Service
import ChorusService
import ChorusTestSupport
import Foundation
import Testing

/// Replaces what legitimately differs between two stores that are copies of
/// one another (event ids and clock values, which depend on the time of
/// writing, and the times they show) with tokens numbered by first appearance, so that two
/// transcripts compare equal exactly when they say the same things.
struct Normalizer {
    private var tokens: [String: String] = [:]

    mutating func callAsFunction(_ text: String) -> String {
        var out = ""
        var rest = Substring(text)
        // Ids, keys and times; also a duration (`rebuild`'s), which differs from run to run.
        let pattern = /[0-9a-f]{16,}|[0-9]{12,}|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z\+[0-9]+|[0-9]+\.[0-9]{3}(?= s[;.]|")/
        while let match = rest.firstMatch(of: pattern) {
            out += rest[..<match.range.lowerBound]
            let value = String(match.output)
            if tokens[value] == nil { tokens[value] = "<\(tokens.count)>" }
            out += tokens[value] ?? ""
            rest = rest[match.range.upperBound...]
        }
        return out + rest
    }
}

@Suite("the command line through a serving node")
struct ForwardingTests {
    /// A tiny PNG header of the given size: enough to be recognised as an image.
    static func png(_ w: UInt8, _ h: UInt8) -> Data {
        Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, w, 0, 0, 0, h, 8, 2, 0, 0, 0])
    }

    /// One step of the script: arguments with `$name` placeholders, and the
    /// variable its first output line sets.
    struct Step {
        let arguments: [String]
        var capture: String? = nil
        var input: Data? = nil
        /// Binary output: only its length is compared.
        var binary = false
    }

    @Test("mutations and queries run through `chorus serve` print exactly what they print without it")
    func servedEqualsDirect() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        let fm = FileManager.default
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("template"), "--name", "Ann"]).status == 0)
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("bob"), "--name", "Bob"]).status == 0)
        let bob = try #require(try await runCommand(chorus, ["whoami", "--store", dir.store("bob")]).stdout.split(separator: "\n").first?
            .split(separator: " ").last.map(String.init))
        // Two identical stores and working directories: A is used directly, B through its server.
        for side in ["a", "b"] {
            try fm.createDirectory(atPath: dir.store(side), withIntermediateDirectories: true)
            try fm.copyItem(atPath: dir.store("template"), toPath: dir.store(side) + "/store")
            _ = fm.createFile(atPath: dir.store(side) + "/roof.png", contents: Self.png(4, 3))
            _ = fm.createFile(atPath: dir.store(side) + "/bridge.png", contents: Self.png(5, 3))
            _ = fm.createFile(atPath: dir.store(side) + "/notes.txt", contents: Data("not an image".utf8))
        }
        let server = try await ServerProcess.start(chorus: chorus, store: dir.store("b") + "/store")
        defer { server.kill() }

        let s = ["--store", "store"]  // relative: the client's working directory decides
        let steps: [Step] = [
            Step(arguments: ["whoami"] + s), Step(arguments: ["whoami", "--json"] + s),
            Step(arguments: ["profile", "set", "bio", "Rooftops, mostly"] + s),
            Step(arguments: ["profile", "set", "city", "Lisbon", "--json"] + s),
            Step(arguments: ["profile", "set", "bio", "--text=-5"] + s),
            Step(arguments: ["picture", "add", "roof.png", "--caption", "Roof"] + s, capture: "roof"),
            Step(arguments: ["picture", "add", "bridge.png"] + s, capture: "bridge"),
            Step(arguments: ["picture", "add", "missing.png"] + s),
            Step(arguments: ["picture", "add", "notes.txt"] + s),
            Step(arguments: ["picture", "move", "$roof", "--first"] + s),
            Step(arguments: ["picture", "caption", "$bridge", "Bridge in the fog", "--json"] + s),
            Step(arguments: ["profile", "set", "avatar", "$roof"] + s),
            Step(arguments: ["query", "pictures"] + s), Step(arguments: ["query", "pictures", "--json"] + s),
            Step(arguments: ["query", "profile"] + s), Step(arguments: ["query", "profile", "--json"] + s),
            Step(arguments: ["picture", "get", "$roof", "--out", "copy.png"] + s),
            Step(arguments: ["picture", "get", "$roof", "--out", "-"] + s, binary: true),
            Step(arguments: ["follow", bob] + s), Step(arguments: ["like", "$roof", "--json"] + s),
            Step(arguments: ["query", "likes", "$roof", "--json"] + s),
            Step(arguments: ["chat", "create", "--title", "Roofs", "--member", bob] + s, capture: "chat"),
            Step(arguments: ["chat", "send", "$chat", "--text", "Look", "--picture", "$roof"] + s, capture: "message"),
            Step(arguments: ["query", "chat", "$chat"] + s), Step(arguments: ["query", "chats", "--json"] + s),
            Step(arguments: ["coins", "spend", "5", "--for", "a slot"] + s),
            Step(arguments: ["query", "balance"] + s), Step(arguments: ["query", "no-effect"] + s),
            Step(arguments: ["picture", "delete", "$bridge"] + s),
            Step(arguments: ["query", "picture", "$bridge", "--json"] + s),
            Step(arguments: ["export", "events.cbor", "--json"] + s),
            Step(arguments: ["export", "-", "--format", "jsonl"] + s),
            Step(arguments: ["import", "events.cbor"] + s),
            Step(arguments: ["import", "-", "--json"] + s, input: Data("not an export".utf8)),
            Step(arguments: ["log", "--limit", "3"] + s),
            Step(arguments: ["query", "digest", "--json"] + s),
            Step(arguments: ["rebuild", "--json"] + s),
            Step(arguments: ["follow", "12"] + s),
            Step(arguments: ["picture", "--help"]),
            Step(arguments: ["query", "feed", "--limit", "-3"] + s),
        ]
        var normalize = (a: Normalizer(), b: Normalizer())
        var variables = (a: [String: String](), b: [String: String]())
        for step in steps {
            var results: [CommandResult] = []
            for side in ["a", "b"] {
                let vars = side == "a" ? variables.a : variables.b
                let arguments = step.arguments.map { $0.hasPrefix("$") ? vars[String($0.dropFirst())] ?? $0 : $0 }
                let result = try await runCommand(chorus, arguments, input: step.input, directory: dir.store(side))
                if let name = step.capture {
                    let first = result.stdout.split(separator: "\n").first.map(String.init) ?? ""
                    if side == "a" { variables.a[name] = first } else { variables.b[name] = first }
                }
                results.append(result)
            }
            let (a, b) = (results[0], results[1])
            #expect(a.status == b.status, "\(step.arguments): exit \(a.status) directly, \(b.status) served; \(b.stderr)")
            if step.binary {
                #expect(a.stdout.utf8.count == b.stdout.utf8.count, "\(step.arguments)")
            } else {
                #expect(normalize.a(a.stdout) == normalize.b(b.stdout), "\(step.arguments)")
            }
            #expect(normalize.a(a.stderr) == normalize.b(b.stderr), "\(step.arguments)")
        }
        // The server really ran them: its store holds B's events, and the
        // files the commands wrote are in B's directory, not the server's.
        #expect(fm.fileExists(atPath: dir.store("b") + "/copy.png"))
        #expect(fm.fileExists(atPath: dir.store("b") + "/events.cbor"))
        let served = try await runCommand(chorus, ["log", "--json", "--store", dir.store("b") + "/store"])
        #expect(served.status == 0 && served.stdout.contains("picture.created"))
        #expect(await server.stop() == 0)
    }

    @Test("a command that needs the store to itself says a server runs on it, at once")
    func storeToItselfRefusedWhileServing() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("s")]).status == 0)
        let server = try await ServerProcess.start(chorus: chorus, store: dir.store("s"))
        defer { server.kill() }
        for arguments in [["upgrade"], ["issuer", "create"], ["serve", "--listen", "127.0.0.1:0"]] {
            let r = try await runCommand(chorus, arguments + ["--store", dir.store("s")])
            #expect(r.status == 2, "\(arguments)")
            #expect(r.stderr.contains("`chorus serve` is running on"), "\(arguments): \(r.stderr)")
        }
        // After the server stops, the store is free again.
        #expect(await server.stop() == 0)
        #expect(!FileManager.default.fileExists(atPath: APIPaths.socket(inStore: dir.store("s"))))
        #expect(try await runCommand(chorus, ["rebuild", "--store", dir.store("s")]).status == 0)
    }

    @Test("`chorus sync --live` run through a server ends when its client is interrupted")
    func liveSyncEndsWithItsClient() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("a")]).status == 0)
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("peer"), "--network", dir.store("a") + "/network.json"]).status == 0)
        let server = try await ServerProcess.start(chorus: chorus, store: dir.store("a"))
        defer { server.kill() }
        let peer = try await ServerProcess.start(chorus: chorus, store: dir.store("peer"))
        defer { peer.kill() }
        let client = ChildProcess()
        client.executableURL = URL(fileURLWithPath: chorus)
        client.arguments = ["sync", "--live", "--store", dir.store("a"), "127.0.0.1:\(peer.syncPort)"]
        client.standardOutput = FileHandle.nullDevice
        client.standardError = FileHandle.nullDevice
        try client.run()
        func waitFor(_ what: String, _ condition: () -> Bool) async throws {
            for _ in 0..<400 where !condition() { try await Task.sleep(for: .milliseconds(50)) }
            #expect(condition(), "\(what): \(peer.output)")
        }
        try await waitFor("the live session starts at the peer") { peer.output.contains("session start") }
        // The session stays up while the client runs.
        try await Task.sleep(for: .milliseconds(500))
        #expect(!peer.output.contains("session end") && !peer.output.contains("session error"))
        kill(client.processIdentifier, SIGINT)
        #expect(await client.exit(within: .seconds(120)), "the live sync kept running 120 s after SIGINT")
        // The server notices the client left and ends the live sync it ran for it.
        try await waitFor("the live session ends once its client is gone") {
            peer.output.contains("session end") || peer.output.contains("session error")
        }
        #expect(await server.stop() == 0)
    }

    @Test("a live `chorus sync` whose peer dies exits 2 and says the peer went away")
    func liveSyncWhosePeerDiesFails() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("a")]).status == 0)
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("peer"), "--network", dir.store("a") + "/network.json"]).status == 0)
        let peer = try await ServerProcess.start(chorus: chorus, store: dir.store("peer"))
        defer { peer.kill() }
        // Standard error to a file, read while the client runs: the peer dies
        // only once the client says its initial sync is complete (a peer
        // that dies before that is a failed sync, not a live one ending).
        let log = dir.store("client-stderr")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let client = ChildProcess()
        client.executableURL = URL(fileURLWithPath: chorus)
        client.arguments = ["sync", "--live", "--store", dir.store("a"), "127.0.0.1:\(peer.syncPort)"]
        client.standardOutput = FileHandle.nullDevice
        client.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        try client.run()
        func said() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        for _ in 0..<1200 where !said().contains("initial sync complete") && client.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(said().contains("initial sync complete"), "the live sync never completed its initial sync: \(said())")
        kill(peer.process.processIdentifier, SIGKILL)
        for _ in 0..<1200 where client.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        if client.isRunning { kill(client.processIdentifier, SIGKILL) }
        await client.exit()
        let status = client.terminationStatus
        #expect(status == 2 && said().contains("went away"), "exit \(status): \(said())")
    }

    @Test("an import run through a server stops reading its file once its client is gone")
    func forwardedImportStopsWithItsClient() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("a")]).status == 0)
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("s")]).status == 0)
        let big = try await Self.bigImportFile(chorus, dir)
        let server = try await ServerProcess.start(chorus: chorus, store: dir.store("s"))
        defer { server.kill() }
        let (client, _) = try Self.startChorus(chorus, ["import", "--store", dir.store("s"), big])
        let pid = server.process.processIdentifier
        func serverHoldsTheFile() -> Bool {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return fds.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == big }
        }
        var reading = false
        for _ in 0..<400 where !reading {
            reading = serverHoldsTheFile()
            if !reading { try await Task.sleep(for: .milliseconds(25)) }
        }
        #expect(reading, "the server never opened the file")
        kill(client.processIdentifier, SIGKILL)
        await client.exit()
        // The heartbeat notices the client within seconds; the import then stops at its next slice.
        // (Read to its end, the file takes the server over 40 s here.)
        var stopped = false
        for _ in 0..<300 where !stopped {
            stopped = !serverHoldsTheFile()
            if !stopped { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(stopped, "the server still reads the file 15 s after its client was killed")
        #expect(server.process.isRunning)
    }

    /// One store's export (two events) 200,000 times over: every copy is
    /// verified before anything is stored, which takes a server many seconds.
    static func bigImportFile(_ chorus: String, _ dir: TempDir) async throws -> String {
        let one = dir.path + "/one.cbor"
        #expect(try await runCommand(chorus, ["export", "--store", dir.store("a"), one]).status == 0)
        let envelope = try Data(contentsOf: URL(fileURLWithPath: one))
        let big = dir.path + "/big.cbor"
        var data = Data()
        data.reserveCapacity(envelope.count * 200_000)
        for _ in 0..<200_000 { data.append(envelope) }
        try data.write(to: URL(fileURLWithPath: big))
        return big
    }

    @Test("an import cut off by its server's death says the server stopped, and exits 2")
    func importCutOffByTheServersDeath() async throws {
        let chorus = try productPath("chorus")
        let dir = TempDir()
        defer { dir.cleanup() }
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("a")]).status == 0)
        #expect(try await runCommand(chorus, ["init", "--store", dir.store("s")]).status == 0)
        let big = try await Self.bigImportFile(chorus, dir)
        let server = try await ServerProcess.start(chorus: chorus, store: dir.store("s"))
        defer { server.kill() }
        let (client, errors) = try Self.startChorus(chorus, ["import", "--store", dir.store("s"), big])
        try await Task.sleep(for: .seconds(1))
        kill(server.process.processIdentifier, SIGKILL)
        let (status, stderr) = try await Self.exit(of: client, errors, "the import after its server died")
        #expect(status == 2 && stderr.contains("stopped before the command finished"), "exit \(status): \(stderr)")
    }

    /// `chorus ARGUMENTS` started in the background, its standard error in a pipe.
    static func startChorus(_ chorus: String, _ arguments: [String]) throws -> (ChildProcess, Pipe) {
        let client = ChildProcess()
        client.executableURL = URL(fileURLWithPath: chorus)
        client.arguments = arguments
        let errors = Pipe()
        client.standardOutput = FileHandle.nullDevice
        client.standardError = errors
        try client.run()
        return (client, errors)
    }

    /// Waits up to 30 s for `client` to exit (then kills it and records
    /// `what`); returns its status and standard error.
    static func exit(of client: ChildProcess, _ errors: Pipe, _ what: String) async throws -> (Int32, String) {
        for _ in 0..<600 where client.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        if client.isRunning {
            kill(client.processIdentifier, SIGKILL)
            Issue.record("\(what) kept running for 30 s")
        }
        await client.exit()
        return (client.terminationStatus, String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
    }
}
#endif
