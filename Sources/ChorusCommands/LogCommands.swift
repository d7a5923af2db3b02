import ArgumentParser
import ChorusCommandLine
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusOperations
import ChorusStorage
import Foundation

struct Log: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List stored events in local arrival order.",
        discussion: "--since N lists what arrived after local arrival position N (see the ARRIVAL column).")

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Option(help: ArgumentHelp("Only events of this author (64 hex digits).", valueName: "hex")) var author: String?
    @Option(help: ArgumentHelp("Only events of this kind, e.g. profile.set.", valueName: "kind")) var kind: String?
    @Option(help: ArgumentHelp("Only events that arrived after this position.", valueName: "n")) var since: UInt64 = 0
    @Option(help: ArgumentHelp("At most this many events.", valueName: "n")) var limit: Int?
    @Flag(help: "The latest events, newest first (with --limit, the last N that match).") var latest = false

    func validate() throws {
        if let kind, EventKind(name: kind) == nil {
            throw ValidationError(
                "unknown kind \"\(kind)\"; kinds are \(EventKind.known.map(\.name).joined(separator: ", "))")
        }
        if let author { _ = try parseKey(author, what: "--author") }
        if let limit, limit < 0 { throw ValidationError("--limit must not be negative") }
    }

    func run() async throws {
        let operation = ListLog(
            author: try author.map { try parseKey($0, what: "--author") }, kind: kind.flatMap(EventKind.init(name:)), since: since, limit: limit,
            latest: latest)
        let result = try await withNode(store, readOnly: true) { node in try await operation.run(on: node) }
        let events = result.events
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
            return
        }
        if events.isEmpty {
            emit("No events.")
            return
        }
        let rows = events.map { s -> [String] in
            let e = s.event
            return [String(s.arrival), e.author.short, String(e.seq), e.kind.name, e.object.short,
                    e.hlc.description, summary(e)]
        }
        emit(table(rows, header: ["ARRIVAL", "AUTHOR", "SEQ", "KIND", "OBJECT", "TIME", "PAYLOAD"]))
    }

    func summary(_ event: Event) -> String {
        guard let payload = event.payload else { return "(purged)" }
        let text = JSONValue(cbor: payload).rendered()
        return text.count > 60 ? String(text.prefix(57)) + "..." : text
    }
}

struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write every stored event to a file, in arrival order.",
        discussion: """
            cbor: a CBOR sequence of whole events exactly as stored (header, signature, payload). \
            jsonl: one JSON object per line, with the envelope in hex under "raw". \
            Both can be read back with `chorus import`.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "The file to write (- for standard output).") var file: String
    @Option(help: "cbor or jsonl.") var format: Format = .cbor

    enum Format: String, ExpressibleByArgument, CaseIterable { case cbor, jsonl }

    func run() async throws {
        let node = try await store.open(readOnly: true)
        let export = ExportEvents(format: format == .cbor ? .cbor : .jsonl)
        let summary: ExportEvents.Summary
        do {
            if file == "-" {
                summary = try await export.run(on: node) { Console.write(Data($0)) }
            } else {
                // Into a file beside the target, renamed over it at the end:
                // a failed export leaves no half-written file. Owner-only, as
                // the store is (Specs/storage.md §1): beyond public events it
                // holds who talks to whom and when.
                var written = ExportEvents.Summary()
                try await OwnerOnlyFile.replace(Console.path(file), writingPieces: { handle in
                    written = try await export.run(on: node) { try handle.write(contentsOf: $0) }
                })
                summary = written
            }
        } catch OwnerOnlyFileError.cannotCreate(_, let reason) {
            throw CommandFailure(message: "cannot write \(file): \(reason); check the directory exists and is writable")
        } catch {
            throw CommandFailure(message: "cannot write \(file): \(error.localizedDescription)")
        }
        let (count, bytes) = (summary.events, summary.bytes)
        await release(node)
        if output.json {
            printJSON(.object([("events", .int(Int64(count))), ("bytes", .int(Int64(bytes))), ("format", .string(format.rawValue))]))
        } else if file != "-" {
            emit("Exported \(count) events (\(bytes) bytes, \(format.rawValue)) to \(file)")
        }
    }
}

struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify and store the events of an export file.",
        discussion: """
            Every event is checked (canonical encoding, payload hash and schema, \
            signature, its place in its feed). If any event in the file is damaged \
            in itself, nothing is imported unless --partial is given; with it, the \
            events after a damaged one in the same feed are refused too (a feed is \
            never stored with a gap). Exit status: 0 when nothing was refused, 1 \
            otherwise, 2 when the file or store cannot be used.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "An export file (CBOR sequence or JSON lines; - for standard input).") var file: String
    @Flag(help: "Store the valid events even if others in the file are damaged.") var partial = false

    /// Events checked per slice in the first pass: memory stays bounded
    /// whatever the file.
    static let slice = 2048
    /// Events per `Node.ingest` call in the second pass, and calls queued at
    /// once: the next slice is decoded and verified while the writer commits
    /// the ones before it, as a sync receiver does (Specs/storage.md §5.1
    /// step 2). Memory stays bounded by the calls in flight.
    static let ingestSlice = 8192
    static let ingestCallsInFlight = 3

    func run() async throws {
        let (handle, spooled) = try openInput()
        defer {
            try? handle.close()
            if let spooled {
                try? FileManager.default.removeItem(atPath: spooled)
                TemporaryFiles.unregister(spooled)
            }
        }
        let size = (try? handle.seekToEnd()) ?? 0
        try handle.seek(toOffset: 0)
        let bar = ProgressBar()
        defer { bar.finish() }
        func showProgress(_ stage: String) {
            guard let offset = try? handle.offset() else { return }
            bar.update(stage, Int(offset >> 20), Int(size >> 20))
        }
        var summary = ImportSummary()
        // Whether any item is shaped like an envelope, damaged or not: once
        // one is, no other is looked at.
        var sawEnvelope = false
        // Pass 1 (all-or-nothing): is any event damaged in itself? Nothing is stored.
        if !partial {
            let reader = EventFileReader(handle: handle)
            var damaged = false
            while true {
                // A command run for a client that went away is cancelled (Specs/api.md §4.2): stop reading.
                try Task.checkCancellation()
                let items = try reader.next(limit: Self.slice)
                if items.isEmpty { break }
                let base = reader.count - items.count
                if !sawEnvelope { sawEnvelope = items.contains(where: Self.looksLikeEnvelope) }
                for (i, error) in await Node.check(items).enumerated() {
                    if let error {
                        damaged = true
                        summary.record(index: base + i, .refused(error))
                    } else {
                        summary.record(index: base + i, .withheld)
                    }
                }
                showProgress("checking (MiB)")
            }
            if let unreadable = reader.unreadable {
                damaged = true
                summary.record(index: unreadable.index, .refused(.malformedEnvelope(unreadable.reason)))
            }
            if damaged, !sawEnvelope { try notAnEventFile(summary.errors.first?.reason) }
            if damaged {
                bar.finish()
                return try finish(summary)
            }
            try handle.seek(toOffset: 0)
            summary = ImportSummary()
        }
        // Pass 2: ingest slice by slice, each through the one ingest path,
        // with up to `ingestCallsInFlight` calls queued; their results are
        // recorded in file order.
        let node = try await store.open()
        let reader = EventFileReader(handle: handle)
        var inFlight: [(base: Int, ingest: Task<IngestReport, Never>)] = []
        func settleOldest() async {
            let call = inFlight.removeFirst()
            for (i, r) in await call.ingest.value.results.enumerated() { summary.record(index: call.base + i, r) }
        }
        do {
            while true {
                try Task.checkCancellation()
                let items = try reader.next(limit: Self.ingestSlice)
                if items.isEmpty { break }
                let base = reader.count - items.count
                if !sawEnvelope { sawEnvelope = items.contains(where: Self.looksLikeEnvelope) }
                let (queued, signal) = AsyncStream<Void>.makeStream()
                inFlight.append((base, Task { await node.ingest(items, enqueued: { signal.finish() }) }))
                for await _ in queued {}
                if inFlight.count >= Self.ingestCallsInFlight { await settleOldest() }
                showProgress("importing (MiB)")
            }
            while !inFlight.isEmpty { await settleOldest() }
            if let unreadable = reader.unreadable {
                summary.record(index: unreadable.index, .refused(.malformedEnvelope(unreadable.reason)))
            }
            if !sawEnvelope, summary.errorCount > 0 { try notAnEventFile(summary.errors.first?.reason) }
        } catch {
            // What was queued still becomes durable before the node closes.
            while !inFlight.isEmpty { await settleOldest() }
            await release(node)
            throw error
        }
        await release(node)
        bar.finish()
        try finish(summary)
    }

    /// The input as a seekable file: standard input is first copied to a
    /// temporary file (read twice, never held in memory).
    func openInput() throws -> (FileHandle, spooled: String?) {
        if file == "-", let received = Console.streams?.standardInputFile {
            // The client's standard input, already spooled by the client.
            guard let handle = FileHandle(forReadingAtPath: received) else { throw CommandFailure(message: "cannot read the standard input the client sent") }
            return (handle, nil)
        }
        guard file == "-" else {
            var isDirectory: ObjCBool = false
            let path = Console.path(file)
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                let handle = FileHandle(forReadingAtPath: path)
            else { throw CommandFailure(message: "cannot read \(file): no such file, a directory, or not readable") }
            return (handle, nil)
        }
        let path = try spoolStandardInput(prefix: "chorus-import-")
        guard let handle = FileHandle(forReadingAtPath: path) else { throw CommandFailure(message: "cannot reopen \(path)") }
        return (handle, path)
    }

    /// A file whose very first item is not an event is not an export at all:
    /// one clear error (exit 2) instead of millions of refusals.
    /// An item that is a CBOR array of three items, as every envelope is
    /// (Specs/events.md §3.1), whatever damage it has inside.
    static func looksLikeEnvelope(_ item: [UInt8]) -> Bool {
        guard let value = try? CBORDecoder.decode(item), let array = value.arrayValue else { return false }
        return array.count == 3
    }

    /// Nothing in the file is even shaped like an event: one clear error
    /// (exit 2) instead of one refusal per item.
    func notAnEventFile(_ firstReason: String?) throws -> Never {
        throw CommandFailure(
            message: "\(file == "-" ? "standard input" : file) is not a Chorus event file (a CBOR sequence or JSON lines written by `chorus export`): no item in it is an event\(firstReason.map { " (first problem: \($0))" } ?? "")")
    }

    func finish(_ summary: ImportSummary) throws {
        if output.json {
            printJSON(.object([
                ("accepted", .int(Int64(summary.accepted))),
                ("duplicate", .int(Int64(summary.duplicates))),
                ("refused", .int(Int64(summary.refused))),
                ("withheld", .int(Int64(summary.withheld))),
                ("errors", .array(summary.errors.map { e in
                    .object([("index", .int(Int64(e.index))), ("code", .string(e.code)), ("reason", .string(e.reason))])
                })),
                ("errors_total", .int(Int64(summary.errorCount))),
            ]))
        } else {
            emit("\(summary.accepted) accepted, \(summary.duplicates) duplicate, \(summary.refused) refused")
            for e in summary.errors.prefix(20) { emit("  event \(e.index): \(terminalSafe(e.reason)) [\(e.code)]") }
            if summary.errorCount > 20 { emit("  … and \(summary.errorCount - 20) more (use --json for the first \(ImportSummary.keptErrors))") }
            if summary.withheld > 0 {
                emit("Nothing was imported because the file holds damaged events; use --partial to import the valid ones.")
            }
        }
        if summary.refused > 0 { throw ExitCode(Exit.refused) }
    }
}

/// Counts of an import and its first errors, kept small whatever the file's size.
struct ImportSummary {
    static let keptErrors = 1000
    var accepted = 0, duplicates = 0, withheld = 0, notStored = 0, refusedOnly = 0
    var errors: [(index: Int, code: String, reason: String)] = []
    var errorCount = 0
    /// Everything not stored: refused, withheld or failed to write (as `IngestReport.refused`).
    var refused: Int { refusedOnly + withheld + notStored }

    mutating func record(index: Int, _ result: IngestResult) {
        switch result {
        case .accepted: accepted += 1
        case .duplicate: duplicates += 1
        case .withheld: withheld += 1
        case .refused(let e):
            refusedOnly += 1
            error(index, e.code, e.description)
        case .notStored(let why):
            notStored += 1
            error(index, "not_stored", why)
        }
    }

    private mutating func error(_ index: Int, _ code: String, _ reason: String) {
        errorCount += 1
        if errors.count < Self.keptErrors { errors.append((index, code, reason)) }
    }
}
