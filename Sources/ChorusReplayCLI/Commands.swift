import ArgumentParser
import ChorusCommandLine
import ChorusCBOR
import ChorusCrypto
import ChorusOperations
import ChorusNode
import ChorusProjections
import ChorusReplay
import ChorusStorage
import Foundation

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check every event, feed, fork record and blob, and compare the projections with a rebuild from the log.",
        discussion: "Exit status 0 when the store is intact, 1 with findings.")
    @OptionGroup var store: StoreOption
    @OptionGroup var output: OutputOptions
    @Flag(
        name: .long,
        help: "Also print both projection digests (the live and the rebuilt), to compare with other replicas' (`chorus query digest`). The entry-by-entry comparison does not need them; they cost another pass over the state.")
    var digest = false

    func run() async throws {
        let s = try store.open()
        let bar = ProgressBar()
        let r = try s.verify(digests: digest) { stage, done, total in bar.update(stage, done, total) }
        bar.finish()
        if output.json {
            printJSON(.object([
                ("events", .int(Int64(r.events))), ("feeds", .int(Int64(r.feeds))), ("forks", .int(Int64(r.forks))),
                ("blobs", .int(Int64(r.blobs))),
                ("kinds", .object(r.perKind.sorted { $0.key < $1.key }.map { ($0.key, .int(Int64($0.value))) })),
                ("purged", .object(r.purged.sorted { $0.key < $1.key }.map { ($0.key, .int(Int64($0.value))) })),
                ("projections", .string(r.projectionsMatch.map { $0 ? "equal" : "differ" } ?? "not_compared")),
                ("live_digest", r.liveDigest.map { .string($0.hex) } ?? .null),
                ("rebuilt_digest", r.rebuiltDigest.map { .string($0.hex) } ?? .null),
                ("findings", .array(r.findings.map(findingJSON))),
            ]))
        } else {
            print("\(r.events) events in \(r.feeds) feeds, \(r.forks) fork record\(r.forks == 1 ? "" : "s"), \(r.blobs) blobs")
            for (kind, n) in r.perKind.sorted(by: { $0.key < $1.key }) {
                let purged = r.purged[kind].map { " (\($0) purged)" } ?? ""
                print("  \(kind.padding(toLength: 20, withPad: " ", startingAt: 0)) \(n)\(purged)")
            }
            switch r.projectionsMatch {
            case true?: print("projections: equal to a fold of the log, entry by entry")
            case false?: print("projections: differ from a fold of the log (projection_differs below)")
            case nil: print("projections: not compared (projections_stale below)")
            }
            if digest {
                print("projection digest: live \(r.liveDigest?.hex ?? "-")")
                print("                   log  \(r.rebuiltDigest?.hex ?? "-")")
            }
            printFindings(r.findings)
        }
        if !r.isClean { throw ExitCode(Exit.finding) }
    }
}

struct Rebuild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a fresh store with the same log, blobs and fork evidence, and projections folded from the log.")
    @OptionGroup var store: StoreOption
    @OptionGroup var output: OutputOptions
    @Option(name: .long, help: ArgumentHelp("The new store directory (must not exist, or be empty).", valueName: "dir"))
    var out: String

    func run() async throws {
        let s = try store.open()
        let bar = ProgressBar()
        let rebuilt = try s.rebuild(to: out, progress: { done, total in bar.update("rebuild", done, total) })
        bar.finish()
        let (copy, digest, live, stale) = (rebuilt.copy, rebuilt.digest, rebuilt.liveDigest, rebuilt.liveStale)
        if output.json {
            printJSON(.object([
                ("out", .string(out)), ("events", .int(Int64(try copy.log.eventCount()))), ("digest", .string(digest.hex)),
                ("live_digest", live.map { .string($0.hex) } ?? .null), ("equal", live.map { .bool(digest == $0) } ?? .null),
                ("live_stale", stale.map { .string($0.description) } ?? .null),
            ]))
        } else {
            print("rebuilt \(try copy.log.eventCount()) events into \(out)")
            if let stale {
                print("digest \(digest.hex) (the live store's projections \(stale): not compared)")
            } else if let live {
                print("digest \(digest.hex)\(digest == live ? " (equal to the live store's)" : " (the live store's is \(live.hex): run `chorus-replay diff --against \(out)`)")")
            }
        }
    }
}

struct Diff: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List every projection entry that differs between this store and another (a rebuild, or another node).",
        discussion: "Exit status 0 when the projections are identical, 1 when they differ.")
    @OptionGroup var store: StoreOption
    @OptionGroup var output: OutputOptions
    @Option(name: .long, help: ArgumentHelp("The other store.", valueName: "dir")) var against: String
    @Option(help: "Show at most this many differences.") var limit: Int = 1000

    func run() async throws {
        let a = try store.open()
        let b = try ReplayStore.open(against)
        try a.requireCurrentProjections()
        try b.requireCurrentProjections()
        let diffs = try StateDiff.between(a, b)
        if output.json {
            printJSON(.object([
                ("count", .int(Int64(diffs.count))),
                ("differences", .array(diffs.prefix(limit).map { d in
                    .object([
                        ("entry", .string(d.description)), ("key", .string(Hex.encode(d.key))),
                        ("this", d.left.map { .string(Hex.encode($0)) } ?? .null),
                        ("other", d.right.map { .string(Hex.encode($0)) } ?? .null),
                    ])
                })),
            ]))
        } else if diffs.isEmpty {
            print("the projections are identical")
        } else {
            print("\(diffs.count) entr\(diffs.count == 1 ? "y differs" : "ies differ"):")
            for d in diffs.prefix(limit) {
                print("  \(d.description)")
                print("    this:  \(valueText(d.left))")
                print("    other: \(valueText(d.right))")
            }
        }
        if !diffs.isEmpty { throw ExitCode(Exit.finding) }
    }

    func valueText(_ v: [UInt8]?) -> String {
        guard let v else { return "(absent)" }
        if let cbor = try? CBORDecoder.decode(v) { return JSONValue(cbor: cbor).rendered() }
        return Hex.encode(v)
    }
}

struct History: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Every event that touched an object, in merge order, with what became of it.",
        discussion: """
            OBJECT is a user, device, picture, chat, message or liked object id (hex). Each event shows \
            its decision: applied, superseded (by which event), or no effect and why. Chat titles, \
            message bodies and edits are sealed (Specs/encryption.md); on a member's own store, \
            --decrypt opens them with that device's keys (nothing decrypted is written).
            """)
    @OptionGroup var store: StoreOption
    @OptionGroup var output: OutputOptions
    @Argument(help: "The object id (64 hex digits).") var object: String
    @Flag(help: "Open sealed chat content with this store's device keys (a member's store).") var decrypt = false
    func validate() throws { _ = try parseObject(object) }

    func run() async throws {
        let s = try store.open()
        try s.requireCurrentProjections()
        let entries = try s.history(of: try parseObject(object))
        var reader: EpochKeyFinder? = nil
        if decrypt {
            reader = try Node.epochKeyFinder(at: s.path)
            if reader == nil {
                printError("--decrypt needs this store's encryption key (keys/encryption.secret), and the store has none: open it once with this version of chorus")
                throw ExitCode(Exit.failure)
            }
        }
        func decrypted(_ e: HistoryEntry) throws -> Decrypted? {
            guard let reader, let event = try s.log.event(e.event.id)?.event else { return nil }
            return try s.decrypt(event, with: reader)
        }
        func render(_ d: Decrypted) -> JSONValue {
            switch d {
            case .plaintext(let v): JSONValue(cbor: v)
            case .locked(let epoch): .string("locked: this device holds no key of epoch \(epoch?.short ?? "?")")
            case .unreadable: .string("unreadable: the sealed value does not open with its epoch key")
            }
        }
        if output.json {
            printJSON(.array(try entries.map { e in
                var fields: [(String, JSONValue)] = [
                    ("event", .string(e.event.id.hex)), ("object_class", .string(e.objectClass)),
                    ("object", .string(e.event.object.hex)), ("kind", .string(e.event.kind.name)),
                    ("author", .string(e.event.order.author.hex)), ("hlc", .uint(e.event.order.hlc.rawValue)),
                    ("time", .string(e.event.order.hlc.description)), ("decision", .string(e.decision.code)),
                    ("purged", .bool(e.purged)),
                    ("payload", e.event.payload.map(JSONValue.init(cbor:)) ?? .null),
                ]
                if let d = try decrypted(e) { fields.append(("decrypted", render(d))) }
                switch e.decision {
                case .superseded(let by, let how): fields += [("superseded_by", .string(by.hex)), ("how", .string(how))]
                case .noEffect(let n): fields.append(("reason", .string(n.detail)))
                case .applied: break
                }
                return .object(fields)
            }))
            return
        }
        guard !entries.isEmpty else {
            print("no event touched \(object)")
            return
        }
        for e in entries {
            let payload = e.purged ? "(payload purged)" : e.event.payload.map { JSONValue(cbor: $0).rendered() } ?? ""
            print("\(e.event.order.hlc)  \(e.event.kind.name.padding(toLength: 18, withPad: " ", startingAt: 0)) by \(e.event.order.author.short)  [\(e.objectClass) \(e.event.object.short)]  event \(e.event.id.short)")
            print("    \(e.decision.text)")
            if !payload.isEmpty { print("    \(payload)") }
            if let d = try decrypted(e) { print("    decrypted: \(render(d).rendered())") }
        }
    }
}

struct AsOf: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "as-of",
        abstract: "Answer a `chorus query` as the store was at a point in time.",
        discussion: """
            POINT is hlc:N (an HLC value), an HLC as the tools print it (2026-11-22T10:15:30.123Z+4, \
            as `history` shows an event's), arrival:N (a local arrival position), an ISO 8601 time \
            (2026-11-22T10:15:30Z), a date (2026-11-22: its first instant, UTC) or Unix milliseconds. Everything after `--` is a `chorus query` \
            command, for example: chorus-replay as-of hlc:123 -- balance USER --json (a --store \
            there names the store to read, as before `--`).
            """)
    @OptionGroup var store: StoreOption
    @Argument(help: "The point in time.") var point: String
    @Argument(parsing: .postTerminator, help: "The query (as for `chorus query`).") var query: [String] = []

    func validate() throws {
        _ = try ReplayPoint.parse(point)
        if query.isEmpty { throw ValidationError("give a query after `--`, for example: as-of \(point) -- profile") }
        _ = try storeAndQuery()
    }

    /// The store to read and the query without any `--store` of its own.
    /// The query reads the scratch copy, so a `--store` written after `--`
    /// (as `chorus query` takes it) names the store to read; a different
    /// one on each side of `--` is refused rather than one silently ignored.
    func storeAndQuery() throws -> (store: StoreOption, query: [String]) {
        var rest: [String] = []
        var named: [String] = []
        var words = query.makeIterator()
        while let word = words.next() {
            if word == "--store" {
                guard let value = words.next() else { throw ValidationError("--store after `--` needs a store directory") }
                named.append(value)
            } else if word.hasPrefix("--store=") {
                named.append(String(word.dropFirst("--store=".count)))
            } else {
                rest.append(word)
            }
        }
        var chosen = store
        for value in named {
            if let given = chosen.store, given != value {
                throw ValidationError("two stores given, \(given) and \(value): give --store once (before or after `--`)")
            }
            chosen.store = value
        }
        return (chosen, rest)
    }

    func run() async throws {
        let (store, query) = try storeAndQuery()
        let s = try store.open()
        let at = try ReplayPoint.parse(point)
        let scratch = try ScratchDirectory(prefix: "chorus-as-of", room: try s.env.pageUse().inUse + (64 << 20))
        let dir = scratch.path + "/store"
        let bar = ProgressBar()
        _ = try s.asOf(at, in: dir)
        bar.finish()
        // The query runs through `chorus` itself, so it prints exactly what
        // `chorus query` prints; the scratch store gets a throwaway device key.
        try writeScratchKeys(dir, user: s.ownerUser)
        let chorus = try siblingExecutable("chorus")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: chorus)
        process.arguments = ["query"] + query + ["--store", dir]
        try process.run()
        process.waitUntilExit()
        if process.terminationStatus != 0 { throw ExitCode(process.terminationStatus) }
    }

    func writeScratchKeys(_ dir: String, user: PublicKey?) throws {
        let keys = dir + "/keys"
        try FileManager.default.createDirectory(atPath: keys, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let device = Random.bytes(32)
        let userKey = user ?? SigningKey(seed: device)?.publicKey ?? .zero
        for (name, text) in [("device.secret", Hex.encode(device)), ("user.public", userKey.hex)] {
            do { try OwnerOnlyFile.write(Data((text + "\n").utf8), to: keys + "/" + name) } catch {
                throw ValidationError("cannot write a scratch key file: \(error)")
            }
        }
    }

    func siblingExecutable(_ name: String) throws -> String {
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let candidate = me.deletingLastPathComponent().appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let path = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        throw ValidationError("cannot find the `\(name)` executable next to chorus-replay or on PATH; build both (swift build)")
    }
}

struct Audit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Audits.", subcommands: [AuditCoins.self])
}

struct AuditCoins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "coins",
        abstract: "Trace every coin from its purchase receipt, checking the escrow counter's invariants at every step.",
        discussion: "Exit status 0 when every invariant holds, 1 with findings.")
    @OptionGroup var store: StoreOption
    @OptionGroup var output: OutputOptions
    @Argument(help: "Only this user's devices and coins (default: everyone).") var user: String?
    func validate() throws { if let user { _ = try parseObject(user) } }

    func run() async throws {
        let s = try store.open()
        try s.requireCurrentProjections()
        let audit = try s.auditCoins(user: try user.map(parseObject))
        printCoinAudit(audit, json: output.json)
        if !audit.findings.isEmpty { throw ExitCode(Exit.finding) }
    }
}

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Events per kind and per author, purged payloads, forks and database sizes.")
    @OptionGroup var store: StoreOption
    @OptionGroup var output: OutputOptions
    @Option(help: "List at most this many authors.") var authors: Int = 20

    func run() async throws {
        let s = try store.open().stats()
        if output.json {
            printJSON(.object([
                ("events", .int(Int64(s.events))),
                ("kinds", .object(s.perKind.sorted { $0.key < $1.key }.map { ($0.key, .int(Int64($0.value))) })),
                ("purged", .object(s.purged.sorted { $0.key < $1.key }.map { ($0.key, .int(Int64($0.value))) })),
                ("unknown_kinds", .object(s.unknownKinds.sorted { $0.key < $1.key }.map { (String($0.key), .int(Int64($0.value))) })),
                ("authors", .array(s.perAuthor.prefix(authors).map { .object([("author", .string($0.author.hex)), ("events", .int(Int64($0.events)))]) })),
                ("feeds", .int(Int64(s.perAuthor.count))),
                ("forks", .array(s.forks.map { .object([("author", .string($0.author.hex)), ("seq", .uint($0.seq))]) })),
                ("databases", .object(s.databases.map { ($0.name, .int(Int64($0.bytes))) })),
                ("in_use_bytes", .int(Int64(s.inUseBytes))),
                ("blobs", .int(Int64(s.blobs))), ("blob_bytes", .uint(s.blobBytes)), ("file_bytes", .uint(s.fileBytes)),
            ]))
            return
        }
        print("\(s.events) events in \(s.perAuthor.count) feeds; data file \(s.fileBytes) bytes")
        print("events per kind:")
        for (k, n) in s.perKind.sorted(by: { $0.key < $1.key }) {
            print("  \(k.padding(toLength: 20, withPad: " ", startingAt: 0)) \(n)\(s.purged[k].map { " (\($0) purged)" } ?? "")")
        }
        if !s.unknownKinds.isEmpty {
            let n = s.unknownKinds.values.reduce(0, +)
            print("\(n) events of kinds this version does not know (codes \(s.unknownKinds.keys.sorted().map(String.init).joined(separator: ", "))): stored, verified and relayed, not folded; after upgrading, `chorus rebuild` folds them")
        }
        print("largest feeds:")
        for a in s.perAuthor.prefix(authors) { print("  \(a.author.hex)  \(a.events)") }
        print("forks: \(s.forks.isEmpty ? "none" : s.forks.map { "\($0.author.short)#\($0.seq)" }.joined(separator: ", "))")
        print("blobs: \(s.blobs) (\(s.blobBytes) bytes)")
        print("database sizes (bytes in pages):")
        for d in s.databases { print("  \(d.name.padding(toLength: 14, withPad: " ", startingAt: 0)) \(d.bytes)") }
        print("pages in use: \(s.inUseBytes) bytes of a \(s.fileBytes)-byte data file (the rest is free pages LMDB reuses)")
    }
}
