import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode

/// Stored events in local arrival order, or the latest first (Specs/api.md
/// §5). `GET /v1/log`; `chorus log`. Reads pages of the log until `limit`
/// events match, so a small page costs a small read whatever the log's size.
public struct ListLog: NodeOperation {
    /// `[EVENT, …]` as `chorus log --json` prints them.
    public struct Result: OperationResult {
        /// The events.
        public let events: [StoredEvent]

        /// An array of events.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for e in events { try c.encode(e.json()) }
        }
    }

    /// Only events of this author.
    public let author: PublicKey?
    /// Only events of this kind.
    package let kind: EventKind?
    /// Only events that arrived after this position.
    public let since: UInt64
    /// At most this many events (nil: all).
    public let limit: Int?
    /// The latest first.
    public let latest: Bool

    /// The events matching the filters.
    package init(author: PublicKey? = nil, kind: EventKind? = nil, since: UInt64 = 0, limit: Int? = nil, latest: Bool = false) {
        self.author = author
        self.kind = kind
        self.since = since
        self.limit = limit
        self.latest = latest
    }

    /// How many arrivals one read takes while looking for matches.
    static let page = 1024

    /// Reads the matching events.
    public func run(on node: Node) async throws -> Result {
        if let limit, limit < 0 { throw OperationError(.badInput, code: "bad_limit", "limit must not be negative") }
        let wanted = limit ?? .max
        if wanted == 0 { return Result(events: []) }
        func matches(_ e: StoredEvent) -> Bool { kind.map { e.event.kind == $0 } ?? true }
        if let author {
            // One feed: its events in arrival order are its events in sequence order.
            var events = try node.feed(author).filter { $0.arrival > since && matches($0) }.sorted { $0.arrival < $1.arrival }
            if latest { events.reverse() }
            return Result(events: Array(events.prefix(wanted)))
        }
        var found: [StoredEvent] = []
        if latest {
            // Windows of the log from its end backwards, until enough match:
            // without a kind to filter, every event matches, so a window
            // of what is still wanted (`limit=1`: one event) is enough.
            var end = try node.lastArrival()
            while end > since, found.count < wanted {
                let size = UInt64(kind == nil ? min(wanted - found.count, Self.page) : Self.page)
                let start = max(since, end > size ? end - size : 0)
                let window = try node.arrivals(since: start, limit: Int(end - start))
                found += window.reversed().filter(matches).prefix(wanted - found.count)
                end = start
            }
            return Result(events: found)
        }
        var after = since
        while found.count < wanted {
            let window = try node.arrivals(since: after, limit: kind == nil ? min(wanted - found.count, Self.page) : Self.page)
            guard let last = window.last else { break }
            found += window.filter(matches).prefix(wanted - found.count)
            after = last.arrival
        }
        return Result(events: found)
    }
}

extension ListLog {
    /// One event as `StoredEvent.json()` writes it (without `raw`).
    public static var eventSchema: JSONSchema {
        .object([
            ("id", .hex32), ("author", .hex32), ("seq", .integer), ("prev", .nullable(.hex32)), ("hlc", .integer), ("time", .string),
            ("kind", .string), ("object", .hex32), ("payload", .anyValue), ("payload_hash", .hex32), ("payload_length", .integer),
            ("purged", .boolean), ("arrival", .integer),
        ])
    }
}

extension ListLog.Result {
    /// `[EVENT, …]`.
    public static var schema: JSONSchema { .array(.ref("Event")) }
}
