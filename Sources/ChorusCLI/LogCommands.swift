import ArgumentParser
import ChorusCommandLine
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
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

    func validate() throws {
        if let kind, EventKind(name: kind) == nil {
            throw ValidationError(
                "unknown kind \"\(kind)\"; kinds are \(EventKind.known.map(\.name).joined(separator: ", "))")
        }
        if let author { _ = try parseKey(author, what: "--author") }
        if let limit, limit < 0 { throw ValidationError("--limit must not be negative") }
    }

    func run() async throws {
        let node = try await store.open(readOnly: true)
        let authorKey = try author.map { try parseKey($0, what: "--author") }
        let kindFilter = kind.flatMap(EventKind.init(name:))
        var events: [StoredEvent]
        if let authorKey {
            events = try node.feed(authorKey).filter { $0.arrival > since }.sorted { $0.arrival < $1.arrival }
        } else {
            events = try node.arrivals(since: since)
        }
        if let kindFilter { events = events.filter { $0.event.kind == kindFilter } }
        if let limit { events = Array(events.prefix(limit)) }

        if output.json {
            printJSON(.array(events.map { $0.json() }))
            return
        }
        if events.isEmpty {
            print("No events.")
            return
        }
        let rows = events.map { s -> [String] in
            let e = s.event
            return [String(s.arrival), e.author.short, String(e.seq), e.kind.name, e.object.short,
                    e.hlc.description, summary(e)]
        }
        print(table(rows, header: ["ARRIVAL", "AUTHOR", "SEQ", "KIND", "OBJECT", "TIME", "PAYLOAD"]))
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
        let fileFormat: EventFileFormat = format == .cbor ? .cbor : .jsonl
        var out: [UInt8] = []
        var count = 0
        var since: UInt64 = 0
        while true {
            let page = try node.arrivals(since: since, limit: 4096)
            guard let last = page.last else { break }
            for stored in page { EventFile.append(stored, format: fileFormat, to: &out) }
            count += page.count
            since = last.arrival
        }
        if file == "-" {
            FileHandle.standardOutput.write(Data(out))
        } else {
            guard FileManager.default.createFile(atPath: file, contents: Data(out)) else {
                throw CommandFailure(message: "cannot write \(file): check the directory exists and is writable")
            }
        }
        if output.json {
            printJSON(.object([("events", .int(Int64(count))), ("bytes", .int(Int64(out.count))), ("format", .string(format.rawValue))]))
        } else if file != "-" {
            print("Exported \(count) events (\(out.count) bytes, \(format.rawValue)) to \(file)")
        }
    }
}

struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify and store the events of an export file.",
        discussion: """
            Every event is checked (canonical encoding, payload hash and schema, \
            signature, its place in its feed). If any event in the file is damaged \
            in itself, nothing is imported unless --partial is given. Exit status: \
            0 when nothing was refused, 1 otherwise, 2 when the file or store cannot be used.
            """)

    @OptionGroup var store: StoreOptions
    @OptionGroup var output: OutputOptions
    @Argument(help: "An export file (CBOR sequence or JSON lines; - for standard input).") var file: String
    @Flag(help: "Store the valid events even if others in the file are damaged.") var partial = false

    func run() async throws {
        let data: Data?
        if file == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            data = FileManager.default.contents(atPath: file)
        }
        guard let data else { throw CommandFailure(message: "cannot read \(file): no such file or not readable") }
        let contents = EventFile.read(Array(data))
        let node = try await store.open()
        var report: IngestReport
        if let unreadable = contents.unreadable, !partial {
            // The file is damaged at a point after which nothing can be read: store nothing.
            report = IngestReport(results: Array(repeating: .withheld, count: contents.envelopes.count))
            report.results.append(.refused(.malformedEnvelope(unreadable.reason)))
        } else {
            report = partial ? await node.ingest(contents.envelopes) : await node.ingestAllOrNothing(contents.envelopes)
            if let unreadable = contents.unreadable { report.results.append(.refused(.malformedEnvelope(unreadable.reason))) }
        }
        await node.close()

        if output.json {
            printJSON(.object([
                ("accepted", .int(Int64(report.accepted))),
                ("duplicate", .int(Int64(report.duplicates))),
                ("refused", .int(Int64(report.refused))),
                ("errors", .array(report.errors.map { e in
                    .object([("index", .int(Int64(e.index))), ("code", .string(e.code)), ("reason", .string(e.reason))])
                })),
            ]))
        } else {
            print("\(report.accepted) accepted, \(report.duplicates) duplicate, \(report.refused) refused")
            for e in report.errors.prefix(20) { print("  event \(e.index): \(terminalSafe(e.reason)) [\(e.code)]") }
            if report.errors.count > 20 { print("  … and \(report.errors.count - 20) more (use --json for all)") }
            if report.withheld > 0 {
                print("Nothing was imported because the file holds damaged events; use --partial to import the valid ones.")
            }
        }
        if report.refused > 0 { throw ExitCode(Exit.refused) }
    }
}
