import ChorusCrypto
import ChorusEvents
import ChorusLog
import Foundation

public struct StoreStats: Sendable {
    public var events = 0
    public var perKind: [String: Int] = [:]
    public var perAuthor: [(author: PublicKey, events: Int, head: UInt64)] = []
    public var purged: [String: Int] = [:]
    /// Events of kinds this version does not know, by code: stored,
    /// verified and relayed, not folded (Specs/events.md §6.3).
    public var unknownKinds: [UInt64: Int] = [:]
    public var forks: [(author: PublicKey, seq: UInt64)] = []
    public var databases: [(name: String, bytes: Int)] = []
    /// Bytes of the pages in use in the data file (the rest of it is free pages).
    public var inUseBytes = 0
    public var blobs = 0
    public var blobBytes: UInt64 = 0
    public var fileBytes: UInt64 = 0
}

/// Events counted by kind, and those of them whose payload is purged,
/// named only when the count is read: hashing a kind's name for every
/// event of a log was a string hash per event.
struct KindTally {
    private var counts: [EventKind: (events: Int, purged: Int)] = [:]

    mutating func add(_ event: Event) { add(event.kind, purged: event.payloadBytes == nil) }

    mutating func add(_ kind: EventKind, purged: Bool) {
        counts[kind, default: (0, 0)].events += 1
        if purged { counts[kind, default: (0, 0)].purged += 1 }
    }

    /// Adds the counts, by kind name, to `perKind` and `purged`.
    func add(to perKind: inout [String: Int], purged: inout [String: Int]) {
        for (kind, n) in counts {
            perKind[kind.name, default: 0] += n.events
            if n.purged > 0 { purged[kind.name, default: 0] += n.purged }
        }
    }
}

extension ReplayStore {
    /// Events per kind and per author, purged payloads, forks, and the size
    /// of every database.
    public func stats() throws -> StoreStats {
        var s = StoreStats()
        var kinds = KindTally()
        try log.rawEnvelopes { slice in
            for record in slice {
                guard let event = try? LogStore.decodeEnvelope(record.bytes, arrival: record.arrival) else { continue }
                s.events += 1
                kinds.add(event)
                if !event.kind.isKnown { s.unknownKinds[event.kind.code, default: 0] += 1 }
            }
            return true
        }
        kinds.add(to: &s.perKind, purged: &s.purged)
        s.perAuthor = try log.allHeads().map { ($0.author, Int($0.head.seq), $0.head.seq) }
            .sorted { ($0.events, $1.author) > ($1.events, $0.author) }
        s.forks = try log.forkEvidence().map { ($0.author, $0.seq) }
        s.databases = try log.databaseSizes() + projections.databaseSizes() + [("blobs", try blobs.databaseSize())]
        // The node's sync bookkeeping, so its pages are not counted as another's.
        if let bookkeeping = store.bookkeeping {
            for (name, db) in bookkeeping.named {
                s.databases.append((name, try env.pageCount(of: db)))
            }
        }
        let use = try env.pageUse()
        s.inUseBytes = use.inUse
        // LMDB counts a database of duplicates without the trees of its
        // large value sets: feed positions take what the others leave.
        if let i = s.databases.firstIndex(where: { $0.name == LogStore.positionsName }) {
            let others = s.databases.enumerated().reduce(0) { $0 + ($1.offset == i ? 0 : $1.element.bytes) }
            s.databases[i].bytes = max(s.databases[i].bytes, use.inUse - use.bookkeeping - others)
        }
        let all = try blobs.all()
        s.blobs = all.count
        s.blobBytes = all.reduce(0) { $0 + $1.size }
        let attributes = try? FileManager.default.attributesOfItem(atPath: path + "/data.mdb")
        s.fileBytes = (attributes?[.size] as? NSNumber)?.uint64Value ?? 0
        return s
    }
}
