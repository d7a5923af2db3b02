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

    func run() async throws {
        let (path, spooled) = try inputPath()
        defer {
            if spooled {
                try? FileManager.default.removeItem(atPath: path)
                TemporaryFiles.unregister(path)
            }
        }
        let bar = ProgressBar()
        defer { bar.finish() }
        // The same operation `POST /v1/import` runs.
        let operation = ImportEvents(
            .file(path: path, name: file == "-" ? "standard input" : file), partial: partial, onProgress: { bar.update($0, $1, $2) })
        let outcome = try await withNode(store) { node in await operation.perform(on: node) }
        bar.finish()
        switch outcome {
        case .success(let result): try finish(result)
        case .failure(let failure): throw CommandFailure(message: failure.message)
        }
    }

    /// The input as a seekable file's path: standard input is first copied to
    /// a temporary file (read twice, never held in memory); true when it was.
    func inputPath() throws -> (String, spooled: Bool) {
        if file == "-", let received = Console.streams?.standardInputFile {
            // The client's standard input, already spooled by the client.
            return (received, false)
        }
        guard file == "-" else {
            var isDirectory: ObjCBool = false
            let path = Console.path(file)
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                FileManager.default.isReadableFile(atPath: path)
            else { throw CommandFailure(message: "cannot read \(file): no such file, a directory, or not readable") }
            return (path, false)
        }
        return (try spoolStandardInput(prefix: "chorus-import-"), true)
    }

    func finish(_ result: ImportEvents.Result) throws {
        let summary = result.summary
        if output.json {
            printJSON(try JSONValueEncoder().encode(result))
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
