import ChorusCrypto
import ChorusEvents
import ChorusStorage

extension LogStore {
    /// Upgrades the log of a store of format 1 to the current format
    /// (Specs/storage.md §4.1), keeping every event, its arrival position,
    /// its payload or purge, and the fork evidence. The caller holds the
    /// store's writer lock. Returns false when the store is already current.
    ///
    /// Format 1 kept envelopes under their ids (`events`), feeds as
    /// author ‖ seq → id and an arrival log of ids. The copy runs in slices,
    /// each its own transaction; the old databases are read, never written,
    /// until the last transaction drops them and records the new version, so
    /// an interrupted upgrade resumes where it stopped and the store stays
    /// format 1 until it is complete.
    @discardableResult
    public static func upgrade(
        env: Environment, sliceSize: Int = 20_000, progress: ((_ done: Int, _ total: Int) -> Void)? = nil,
        isCancelled: (() -> Bool)? = nil
    ) throws -> Bool {
        let meta = try env.openDatabase("meta")
        guard let version = try storedFormat(env: env, meta: meta) else { throw LogError.notAStore(path: env.path) }
        if version == formatVersion { return false }
        if version > formatVersion { throw LogError.newerFormat(found: version, supported: formatVersion) }
        guard version == 1 else { throw LogError.corrupt("unknown format version \(version)") }

        let oldEvents = try env.openDatabase("events")
        let oldArrivals = try env.openDatabase("arrivals")
        let oldFeeds = try env.openDatabase("feeds")
        let envelopes = try env.openDatabase("envelopes")
        let ids = try env.openDatabase("ids")
        let positions = try env.openDatabase("positions")
        let total = try env.read { txn in try txn.count(oldArrivals) }

        while true {
            if isCancelled?() == true { throw CancellationError() }
            let (copied, done) = try env.write { txn -> (Int, Int) in
                // Resume after the last envelope a previous slice committed.
                let next = try txn.last(envelopes).map { try decodeU64($0.key, what: "arrival position") + 1 } ?? 1
                var copied = 0
                try txn.scan(oldArrivals, from: encodeU64(next)) { key, value in
                    let arrival = try decodeU64(key, what: "arrival position")
                    guard let id = Bytes32(value) else { throw LogError.corrupt("format 1 arrival \(arrival) names an id of \(value.count) bytes") }
                    guard let record = try txn.get(oldEvents, id.bytes), record.count > 8 else {
                        throw LogError.corrupt("format 1 arrival \(arrival) names event \(id.hex), which is not stored")
                    }
                    let envelope = Array(record[8...])
                    let event = try decodeEnvelope(envelope, arrival: arrival)
                    guard event.id == id else { throw LogError.corrupt("format 1 event stored under \(id.hex) has id \(event.id.hex)") }
                    let arrivalKey = encodeU64(arrival)
                    try txn.put(envelopes, arrivalKey, envelope, append: true)
                    try txn.put(ids, id.bytes, arrivalKey)
                    try txn.put(positions, feedKey(event.author, event.seq), arrivalKey)
                    copied += 1
                    return copied < sliceSize
                }
                return (copied, try txn.count(envelopes))
            }
            progress?(done, total)
            if copied < sliceSize { break }
        }

        try env.write { txn in
            let copied = try txn.count(envelopes)
            let feedEntries = try txn.count(oldFeeds)
            guard copied == total, try txn.count(ids) == total, try txn.count(positions) == feedEntries else {
                throw LogError.corrupt(
                    "format 1 store is inconsistent: \(total) arrivals, \(feedEntries) feed entries, \(copied) events copied; run `chorus-replay verify` on a copy")
            }
            try txn.drop(oldEvents)
            try txn.drop(oldArrivals)
            try txn.drop(oldFeeds)
            try txn.put(meta, formatKey, encodeU64(formatVersion))
        }
        return true
    }
}
