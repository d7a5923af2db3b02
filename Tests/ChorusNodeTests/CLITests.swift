import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import Foundation
import ChorusTestSupport
import Testing

/// End-to-end tests of the `chorus` executable, as a user runs it.
@Suite("chorus CLI", .closingNodes)
struct CLITests {
    let chorus: String
    init() throws { chorus = try productPath("chorus") }

    func run(_ args: String...) async throws -> CommandResult { try await runCommand(chorus, args) }

    func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    /// `log --json` without the local arrival positions, which differ between stores.
    func events(_ store: String, author: String? = nil) async throws -> [[String: String]] {
        var args = ["log", "--store", store, "--json"]
        if let author { args += ["--author", author] }
        let result = try await runCommand(chorus, args)
        #expect(result.status == 0, "\(result.stderr)")
        let list = try #require(try json(result.stdout) as? [[String: Any]])
        return list.map { event in
            var fields: [String: String] = [:]
            for (k, v) in event where k != "arrival" {
                // Canonical text for nested values: dictionary order is not stable.
                let data = try? JSONSerialization.data(withJSONObject: [v], options: [.sortedKeys])
                fields[k] = data.map { String(decoding: $0, as: UTF8.self) } ?? "\(v)"
            }
            return fields
        }.sorted { $0["id"]! < $1["id"]! }
    }

    @Test func initAndWhoamiPrintTheIdsAsLowercaseHex() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let store = tmp.store("a")
        let created = try await run("init", "--store", store, "--name", "Alice", "--json")
        #expect(created.status == 0, "\(created.stderr)")
        let ids = try #require(try json(created.stdout) as? [String: String])
        let who = try await run("whoami", "--store", store, "--json")
        #expect(try json(who.stdout) as? [String: String] == ids)
        for key in ["user", "device"] {
            let value = try #require(ids[key])
            #expect(value.count == 64 && value.allSatisfy { "0123456789abcdef".contains($0) })
        }
        let again = try await run("init", "--store", store)
        #expect(again.status == 2 && again.stderr.contains("already holds a Chorus store"))
        // $CHORUS_STORE is honoured.
        let viaEnv = try await runCommand(chorus, ["whoami", "--json"], environment: ["CHORUS_STORE": store])
        #expect(try json(viaEnv.stdout) as? [String: String] == ids)
    }

    @Test func exportThenImportReproducesTheLogAndRefusesTampering() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        #expect(try await run("init", "--store", a, "--name", "Alice").status == 0)
        #expect(try await run("profile", "set", "--store", a, "city", "Lisbon").status == 0)
        #expect(try await run("profile", "set", "--store", a, "birthday", "1991-04-12").status == 0)
        #expect(try await run("profile", "set", "--store", a, "--clear", "city").status == 0)
        #expect(try await run("init", "--store", b).status == 0)

        for format in ["cbor", "jsonl"] {
            let c = tmp.store("c-\(format)")
            #expect(try await run("init", "--store", c).status == 0)
            let file = tmp.path + "/export.\(format)"
            let exported = try await run("export", "--store", a, file, "--format", format, "--json")
            #expect(exported.status == 0, "\(exported.stderr)")
            #expect(try fileMode(file) == 0o600)  // the store's metadata: its owner's alone
            // Exported again over it: replaced whole, no partial file left beside it.
            #expect(try await run("export", "--store", a, file, "--format", format).status == 0)
            #expect(try fileMode(file) == 0o600)
            #expect(try FileManager.default.contentsOfDirectory(atPath: tmp.path).allSatisfy { !$0.contains(".partial-") })
            let imported = try await run("import", "--store", c, file, "--json")
            #expect(imported.status == 0, "\(imported.stderr)")
            let report = try #require(try json(imported.stdout) as? [String: Any])
            #expect(report["accepted"] as? Int == 6)  // device.added, device.key, name, birthday, city, cleared city
            #expect(report["refused"] as? Int == 0)
            let aEvents = try await events(a)
            let cEvents = Set(try await events(c).map { $0["id"]! })
            #expect(aEvents.allSatisfy { cEvents.contains($0["id"]!) })
            let again = try await run("import", "--store", c, file, "--json")
            #expect(again.status == 0)
            let againReport = try #require(try json(again.stdout) as? [String: Any])
            #expect(againReport["duplicate"] as? Int == 6 && againReport["accepted"] as? Int == 0)
        }

        let file = tmp.path + "/export.cbor"
        #expect(try await run("import", "--store", b, file).status == 0)
        let user = try #require(try json(try await run("whoami", "--store", a, "--json").stdout) as? [String: String])["device"]
        #expect(try await events(a, author: user) == events(b, author: user))

        // One flipped byte in every position class: header, signature, payload.
        let original = try Data(contentsOf: URL(fileURLWithPath: file))
        let before = try await events(b)
        for offset in stride(from: 5, to: original.count, by: max(1, original.count / 23)) {
            var damaged = original
            damaged[offset] ^= 0x01
            let path = tmp.path + "/damaged.cbor"
            try damaged.write(to: URL(fileURLWithPath: path))
            let fresh = tmp.store("fresh-\(offset)")
            #expect(try await run("init", "--store", fresh).status == 0)
            let freshBefore = try await events(fresh)
            let result = try await run("import", "--store", fresh, path, "--json")
            #expect(result.status == 1, "offset \(offset): \(result.stdout) \(result.stderr)")
            let report = try #require(try json(result.stdout) as? [String: Any])
            #expect(report["accepted"] as? Int == 0)
            let errors = try #require(report["errors"] as? [[String: Any]])
            #expect(!errors.isEmpty && errors.allSatisfy { ($0["reason"] as? String ?? "").isEmpty == false })
            #expect(try await events(fresh) == freshBefore, "offset \(offset): store changed")
        }
        #expect(try await events(b) == before)
    }

    /// Import keeps several ingest calls in flight: every result must still
    /// be recorded at its item's place in the file.
    @Test func importOfManySlicesReportsEachRefusalAtItsPlaceInTheFile() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        #expect(try await run("init", "--store", b).status == 0)
        let node = opened(try await Node.create(at: a, network: NetworkConfig()))
        let items = (0..<30_000).map { PendingEvent(ProfileSetPayload(field: .bio, value: .text("edit \($0)")), object: node.identity.user.raw) }
        _ = try await node.appendBatch(items)
        await node.close()
        let file = tmp.path + "/many.jsonl"
        #expect(try await run("export", "--store", a, file, "--format", "jsonl").status == 0)
        var lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
        let stored = lines.count
        // A copy of an event with one signature byte flipped, inserted at
        // places that fall in different ingest calls (8,192 items each).
        let places = [3, 9_000, 17_500, 29_999]
        for place in places {
            let object = try #require(try json(lines[place]) as? [String: Any])
            let raw = try #require(object["raw"] as? String)
            var envelope = try #require(Hex.decode(raw))
            // [header, signature, payload]: the header's length is in its
            // CBOR head (one or two bytes after 0x58 / 0x59).
            let headerEnd = envelope[1] == 0x58 ? 3 + Int(envelope[2]) : 4 + Int(envelope[2]) << 8 + Int(envelope[3])
            #expect(envelope[headerEnd] == 0x58 && envelope[headerEnd + 1] == 64)
            envelope[headerEnd + 2] ^= 0x01
            lines.insert("{\"raw\":\"\(Hex.encode(envelope))\"}", at: place)
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let result = try await run("import", "--store", b, file, "--partial", "--json")
        #expect(result.status == 1, "\(result.stderr)")
        let report = try #require(try json(result.stdout) as? [String: Any])
        #expect(report["accepted"] as? Int == stored)
        #expect(report["refused"] as? Int == places.count)
        let errors = try #require(report["errors"] as? [[String: Any]])
        #expect(errors.compactMap { $0["index"] as? Int } == places)
        #expect(errors.allSatisfy { $0["code"] as? String == "bad_signature" })
    }

    @Test func importSaysWhenAFileIsNotAnEventFileAndReadsStandardInput() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        #expect(try await run("init", "--store", a, "--name", "Alice").status == 0)
        #expect(try await run("init", "--store", b).status == 0)
        // Three megabytes of noise, and a text file: one clear error each, exit 2.
        var g = SystemRandomNumberGenerator()
        let noise = tmp.path + "/noise.bin"
        try Data((0..<(3 << 20)).map { _ in UInt8.random(in: 0...255, using: &g) }).write(to: URL(fileURLWithPath: noise))
        let text = tmp.path + "/notes.txt"
        try Data(String(repeating: "hello world\n", count: 10_000).utf8).write(to: URL(fileURLWithPath: text))
        for file in [noise, text] {
            let r = try await run("import", "--store", b, file)
            #expect(r.status == 2 && r.stderr.contains("is not a Chorus event file"), "\(file): \(r.stdout) \(r.stderr)")
            #expect(!r.stdout.contains("refused"))
        }
        let dir = try await run("import", "--store", b, tmp.path)
        #expect(dir.status == 2 && dir.stderr.contains("a directory"))
        // Standard input: an export piped in is imported like a file.
        let export = tmp.path + "/a.cbor"
        #expect(try await run("export", "--store", a, export).status == 0)
        // Awaited on a thread of its own, not a cooperative one (`offThePool`).
        let (data, status) = try await offThePool {
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: chorus)
            process.arguments = ["import", "--store", b, "-", "--json"]
            process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: export))
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (data, process.terminationStatus)
        }
        #expect(status == 0)
        let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(report["accepted"] as? Int == 3 && report["withheld"] as? Int == 0)  // device.added, device.key, name
    }

    @Test func aStoreWhoseDeviceKeyIsGoneSaysToRestoreItNotToInit() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        #expect(try await run("init", "--store", a).status == 0)
        try FileManager.default.removeItem(atPath: a + "/keys/device.secret")
        let r = try await run("query", "profile", "--store", a)
        #expect(r.status == 2 && r.stderr.contains("restore") && !r.stderr.contains("run chorus init"), "\(r.stderr)")
        let none = try await run("query", "profile", "--store", tmp.store("nowhere"))
        #expect(none.status == 2 && none.stderr.contains("init"))
    }

    @Test func negativeNumbersGetAClearMessageAndOptionValuesMayBeNegative() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        #expect(try await run("init", "--store", a).status == 0)
        let spend = try await run("coins", "spend", "--store", a, "-5", "--for", "x")
        #expect(spend.status == 2 && spend.stderr.contains("-5 is a negative number") && !spend.stderr.contains("Missing expected"))
        // As an option's value, a negative number is that value; after --, a positional one.
        #expect(try await run("profile", "set", "--store", a, "bio", "--", "-5").status == 0)
        let chat = try await run("chat", "create", "--store", a).stdout.split(separator: "\n").first.map(String.init) ?? ""
        #expect(try await run("chat", "send", "--store", a, chat, "--text", "-5").status == 0)
        let page = try await run("query", "chat", "--store", a, chat, "--json").stdout
        #expect(page.contains("\"text\":\"-5\""), "\(page)")
        #expect(try await run("query", "profile", "--store", a, "--json").stdout.contains("\"-5\""))
    }

    @Test("an envelope over the size limit in an event file is refused as envelope_too_large (exit 1), the events before it withheld")
    func oversizedEnvelopeInAFile() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a"), b = tmp.store("b")
        #expect(try await run("init", "--store", a).status == 0)
        #expect(try await run("init", "--store", b).status == 0)
        let exported = tmp.path + "/export.cbor"
        #expect(try await run("export", "--store", a, exported).status == 0)
        // A well-formed CBOR item of three byte strings, 70,174 bytes in all.
        func bstr(_ n: Int) -> [UInt8] { (n < 24 ? [0x40 | UInt8(n)] : n < 256 ? [0x58, UInt8(n)] : n < 65536 ? [0x59, UInt8(n >> 8), UInt8(n & 0xFF)] : [0x5A, UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]) + [UInt8](repeating: 0, count: n) }
        let oversized = [0x83] + bstr(100) + bstr(64) + bstr(70_000)
        let alone = tmp.path + "/alone.cbor", mixed = tmp.path + "/mixed.cbor"
        try Data(oversized).write(to: URL(fileURLWithPath: alone))
        let valid = try Data(contentsOf: URL(fileURLWithPath: exported))
        try (valid + Data(oversized)).write(to: URL(fileURLWithPath: mixed))
        let single = try await run("import", "--store", b, alone, "--json")
        #expect(single.status == 1, "\(single.stdout) \(single.stderr)")
        #expect(single.stdout.contains("\"code\":\"envelope_too_large\""))
        let both = try await run("import", "--store", b, mixed, "--json")
        #expect(both.status == 1 && both.stdout.contains("envelope_too_large") && !both.stdout.contains("malformed_envelope"), "\(both.stdout)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(both.stdout.utf8)) as? [String: Any])
        #expect(report["accepted"] as? Int == 0 && (report["withheld"] as? Int ?? 0) >= 1)
    }

    @Test("standard input that is not an event file is refused at its first byte; an interrupted spool leaves no temporary file")
    func standardInputIsBoundedAndCleanedUp() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        #expect(try await run("init", "--store", a).status == 0)
        let spool = tmp.path + "/spool/"
        try FileManager.default.createDirectory(atPath: spool, withIntermediateDirectories: true)
        // Zero bytes, as from /dev/zero: refused at once, nothing left behind.
        // (Less than a pipe holds: the writer never outlives the reader.)
        let zeros = try await runCommand(chorus, ["import", "--store", a, "-"], environment: ["TMPDIR": spool], input: Data(count: 16 << 10))
        #expect(zeros.status == 2 && zeros.stderr.contains("not a Chorus event file"), "\(zeros.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
        // A stream that looks like an event file and never ends, stopped with SIGTERM while it is spooled.
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: chorus)
        process.arguments = ["import", "--store", a, "-"]
        var env = ProcessInfo.processInfo.environment
        env["TMPDIR"] = spool
        env["CHORUS_STORE"] = nil
        process.environment = env
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The reader may be gone before the writer: no SIGPIPE for this test process.
        signal(SIGPIPE, SIG_IGN)
        try? input.fileHandleForWriting.write(contentsOf: Data("{\"raw\": \"".utf8) + Data(repeating: UInt8(ascii: "0"), count: 1 << 20))
        var spooling = false
        for _ in 0..<400 where !spooling {
            spooling = !(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
            if !spooling { try await Task.sleep(for: .milliseconds(25)) }
        }
        #expect(spooling, "the spool did not start")
        kill(process.processIdentifier, SIGTERM)
        // Up to 30 s: with the whole suite on two cores the handler can wait its turn.
        for _ in 0..<1200 where process.isRunning { try await Task.sleep(for: .milliseconds(25)) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? input.fileHandleForWriting.close()
        await process.exit(within: .seconds(120))
        #expect(process.terminationStatus == 128 + SIGTERM)
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty, "a temporary file was left behind")
    }

    @Test("a text or title that could not be opened once sealed is refused before anything is signed (exit 2)")
    func unsealableTextIsRefused() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        #expect(try await run("init", "--store", a).status == 0)
        let longTitle = try await run("chat", "create", "--store", a, "--title", String(repeating: "t", count: 201))
        #expect(longTitle.status == 2 && longTitle.stderr.contains("200 bytes"), "\(longTitle.stderr)")
        let chat = try await run("chat", "create", "--store", a, "--title", String(repeating: "é", count: 100)).stdout
            .split(separator: "\n").first.map(String.init) ?? ""
        let before = try await run("log", "--store", a, "--json").stdout
        for text in ["", String(repeating: "x", count: 4001)] {
            let sent = try await run("chat", "send", "--store", a, chat, "--text", text)
            #expect(sent.status == 2 && sent.stderr.contains("--text"), "\(sent.stderr)")
        }
        let ok = try await run("chat", "send", "--store", a, chat, "--text", String(repeating: "x", count: 4000))
        #expect(ok.status == 0)
        let message = ok.stdout.split(separator: "\n").first.map(String.init) ?? ""
        let edit = try await run("chat", "edit", "--store", a, message, String(repeating: "y", count: 4001))
        #expect(edit.status == 2 && edit.stderr.contains("4000 bytes"), "\(edit.stderr)")
        // Nothing unreadable was signed: one message more than before, and it reads.
        let after = try await run("log", "--store", a, "--json").stdout
        func count(_ json: String) -> Int { (try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [Any])?.count ?? -1 }
        #expect(count(after) == count(before) + 1, "\(count(before)) events, then \(count(after))")
        #expect(try await run("query", "chat", "--store", a, chat, "--json").stdout.contains("\"content\":\"readable\""))
    }

    @Test("log --latest lists the last events newest first, with and without a filter")
    func logLatest() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        #expect(try await run("init", "--store", a).status == 0)
        for i in 0..<5 { #expect(try await run("profile", "set", "--store", a, "bio", "edit \(i)").status == 0) }
        func arrivals(_ args: String...) async throws -> [Int] {
            let out = try await runCommand(chorus, ["log", "--store", a, "--json"] + args).stdout
            return ((try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]]) ?? []).compactMap { $0["arrival"] as? Int }
        }
        let all = try await arrivals()
        #expect(try await arrivals("--latest", "--limit", "3") == Array(all.suffix(3).reversed()))
        #expect(try await arrivals("--latest", "--kind", "profile.set", "--limit", "2") == Array(all.suffix(2).reversed()))
        #expect(try await arrivals("--latest") == all.reversed())
    }

    @Test func logFiltersByAuthorKindAndArrival() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let a = tmp.store("a")
        #expect(try await run("init", "--store", a, "--name", "Alice").status == 0)
        #expect(try await run("profile", "set", "--store", a, "bio", "hi").status == 0)
        let kinds = try #require(try json(try await run("log", "--store", a, "--kind", "device.added", "--json").stdout) as? [[String: Any]])
        #expect(kinds.count == 1 && kinds[0]["kind"] as? String == "device.added")
        // Arrivals: 1 device.added, 2 device.key, 3 the name, 4 the bio.
        let since = try #require(try json(try await run("log", "--store", a, "--since", "3", "--json").stdout) as? [[String: Any]])
        #expect(since.count == 1 && since[0]["arrival"] as? Int == 4)
        let first = try #require(since.first)
        for key in ["id", "author", "seq", "kind", "hlc", "object", "payload"] { #expect(first[key] != nil, "missing \(key)") }
        #expect((first["payload"] as? [String: String]) == ["field": "bio", "value": "hi"])
        let text = try await run("log", "--store", a)
        #expect(text.status == 0 && text.stdout.contains("profile.set") && text.stdout.contains("ARRIVAL"))
    }

    @Test func errorsSayWhatWasWrongAndExitWithMeaningfulCodes() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let missing = try await run("log", "--store", tmp.store("none"))
        #expect(missing.status == 2 && missing.stderr.contains("chorus init"))
        let badKind = try await run("log", "--store", tmp.store("none"), "--kind", "nope")
        #expect(badKind.status == 2 && badKind.stderr.contains("unknown kind"))
        #expect(try await run("init", "--store", tmp.store("a")).status == 0)
        let badField = try await run("profile", "set", "--store", tmp.store("a"), "shoe", "42")
        #expect(badField.status == 2 && badField.stderr.contains("unknown profile field"))
        let badDate = try await run("profile", "set", "--store", tmp.store("a"), "birthday", "1990-02-30")
        #expect(badDate.status == 2 && badDate.stderr.contains("date"))
        let noFile = try await run("import", "--store", tmp.store("a"), tmp.path + "/nothing.cbor")
        #expect(noFile.status == 2 && noFile.stderr.contains("cannot read"))
        for command in [[], ["init"], ["whoami"], ["profile", "set"], ["log"], ["export"], ["import"]] {
            let help = try await runCommand(chorus, command + ["--help"])
            #expect(help.status == 0 && help.stdout.contains("USAGE"), "\(command)")
        }
    }
}
