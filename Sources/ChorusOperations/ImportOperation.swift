import ChorusCBOR
import ChorusEvents
import ChorusNode
import Foundation

/// Verifies and stores the events of an export file (Specs/events.md §8.3).
/// `POST /v1/import` (the body is the file); `chorus import`. Unless
/// `partial`, a file holding any event damaged in itself stores nothing
/// (its events are withheld); refusals make a 422 that carries the summary.
public struct ImportEvents: NodeOperation {
    /// What the import did: `{"accepted", "duplicate", "refused", "withheld", "errors", "errors_total"}`.
    public struct Result: OperationResult {
        /// The counts and the first refusals.
        public let summary: ImportSummary

        /// The summary's JSON.
        public func encode(to encoder: any Encoder) throws {
            try JSONValue.object([
                ("accepted", .int(Int64(summary.accepted))),
                ("duplicate", .int(Int64(summary.duplicates))),
                ("refused", .int(Int64(summary.refused))),
                ("withheld", .int(Int64(summary.withheld))),
                ("errors", .array(summary.errors.map { e in .object([("index", .int(Int64(e.index))), ("code", .string(e.code)), ("reason", .string(e.reason))]) })),
                ("errors_total", .int(Int64(summary.errorCount))),
            ]).encode(to: encoder)
        }

        /// The summary's schema.
        public static var schema: JSONSchema {
            .object([
                ("accepted", .integer), ("duplicate", .integer), ("refused", .integer), ("withheld", .integer),
                ("errors", .array(.object([("index", .integer), ("code", .string), ("reason", .string)]))), ("errors_total", .integer),
            ])
        }

        /// Some events were not stored.
        public var failure: OperationError? {
            guard summary.refused > 0 else { return nil }
            return OperationError(
                .refused, code: "events_refused",
                summary.withheld > 0
                    ? "nothing was imported because the file holds damaged events; import with partial to store the valid ones"
                    : "\(summary.refused) events were refused")
        }
    }

    /// Where the file is: a seekable file, or bytes (written to a temporary file to be read twice).
    public enum Source: Sendable {
        case file(path: String, name: String)
        case bytes([UInt8])
    }

    /// The file.
    public let source: Source
    /// Store the valid events even if others are damaged.
    public let partial: Bool
    /// Told how far the reading is: a stage, MiB read, MiB in all.
    public let onProgress: (@Sendable (String, Int, Int) -> Void)?

    /// An import of `source`.
    public init(_ source: Source, partial: Bool = false, onProgress: (@Sendable (String, Int, Int) -> Void)? = nil) {
        self.source = source
        self.partial = partial
        self.onProgress = onProgress
    }

    /// Events checked per slice in the first pass: memory stays bounded
    /// whatever the file.
    static let slice = 2048
    /// Events per `Node.ingest` call in the second pass, and calls queued at
    /// once: the next slice is decoded and verified while the writer commits
    /// the ones before it, as a sync receiver does (Specs/storage.md §5.1
    /// step 2). Memory stays bounded by the calls in flight.
    static let ingestSlice = 8192
    static let ingestCallsInFlight = 3

    /// Reads the file twice (unless `partial`): a check, then the ingest.
    public func run(on node: Node) async throws -> Result {
        let (path, name, temporary): (String, String, Bool)
        switch source {
        case .file(let p, let n): (path, name, temporary) = (p, n, false)
        case .bytes(let bytes):
            let p = NSTemporaryDirectory() + "/chorus-import-" + UUID().uuidString
            guard FileManager.default.createFile(atPath: p, contents: Data(bytes), attributes: [.posixPermissions: 0o600]) else {
                throw OperationError(.failed, code: "spool_failed", "cannot write the uploaded file to \(NSTemporaryDirectory())")
            }
            (path, name, temporary) = (p, "the uploaded file", true)
        }
        defer { if temporary { try? FileManager.default.removeItem(atPath: path) } }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw OperationError(.badInput, code: "unreadable_file", "cannot read \(name): no such file, a directory, or not readable")
        }
        defer { try? handle.close() }
        return Result(summary: try await importing(handle, name: name, on: node))
    }

    private func importing(_ handle: FileHandle, name: String, on node: Node) async throws -> ImportSummary {
        let size = (try? handle.seekToEnd()) ?? 0
        try handle.seek(toOffset: 0)
        func showProgress(_ stage: String) {
            guard let onProgress, let offset = try? handle.offset() else { return }
            onProgress(stage, Int(offset >> 20), Int(size >> 20))
        }
        func notAnEventFile(_ firstReason: String?) -> OperationError {
            OperationError(
                .badInput, code: "not_an_event_file",
                "\(name) is not a Chorus event file (a CBOR sequence or JSON lines written by `chorus export`): no item in it is an event\(firstReason.map { " (first problem: \($0))" } ?? "")"
            )
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
                // An import run for a client that went away is cancelled (Specs/api.md §4.2): stop reading.
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
            if damaged, !sawEnvelope { throw notAnEventFile(summary.errors.first?.reason) }
            if damaged { return summary }
            try handle.seek(toOffset: 0)
            summary = ImportSummary()
        }
        // Pass 2: ingest slice by slice, each through the one ingest path,
        // with up to `ingestCallsInFlight` calls queued; their results are
        // recorded in file order.
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
            if !sawEnvelope, summary.errorCount > 0 { throw notAnEventFile(summary.errors.first?.reason) }
        } catch {
            // What was queued still becomes durable before the node closes.
            while !inFlight.isEmpty { await settleOldest() }
            throw error
        }
        return summary
    }

    /// A file whose very first item is not an event is not an export at all:
    /// one clear error instead of millions of refusals. An item that is a
    /// CBOR array of three items, as every envelope is (Specs/events.md
    /// §3.1), whatever damage it has inside.
    static func looksLikeEnvelope(_ item: [UInt8]) -> Bool {
        guard let value = try? CBORDecoder.decode(item), let array = value.arrayValue else { return false }
        return array.count == 3
    }
}

/// What an import did, event by event (Specs/events.md §8.3).
public struct ImportSummary: Sendable {
    /// The refusals kept with their reasons; the rest are only counted.
    public static let keptErrors = 1000
    /// Events stored, already held, withheld (all-or-nothing), failed to write, refused.
    public var accepted = 0, duplicates = 0, withheld = 0, notStored = 0, refusedOnly = 0
    /// The first `keptErrors` refusals: the event's place in the file, its code and why.
    public var errors: [(index: Int, code: String, reason: String)] = []
    /// Every refusal.
    public var errorCount = 0
    /// Everything not stored: refused, withheld or failed to write (as `IngestReport.refused`).
    public var refused: Int { refusedOnly + withheld + notStored }

    /// Nothing yet.
    public init() {}

    /// Counts the outcome of the event at `index` of the file.
    package mutating func record(index: Int, _ result: IngestResult) {
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
