import ChorusCrypto
import ChorusEvents
import ChorusStorage

extension LogStore {
    /// Upgrades the log of a store of an older format to the current one
    /// (Specs/storage.md §4.1, §4.2), keeping every event, its arrival
    /// position, its payload or purge, and the fork evidence. The caller
    /// holds the store's writer lock. Returns the version the store had, or
    /// nil when it is already current.
    ///
    /// Each upgrade copies in slices, each its own transaction; the old
    /// databases are read, never written, until the last transaction drops
    /// them and records the new version, so an interrupted upgrade resumes
    /// where it stopped and the store keeps its old version until it is
    /// complete. `progress` reports the entries copied, over every step the
    /// store needs (a format 2 store takes two).
    @discardableResult
    public static func upgrade(
        env: Environment, sliceSize: Int = 20_000, progress: ((_ done: Int, _ total: Int) -> Void)? = nil,
        isCancelled: (() -> Bool)? = nil
    ) throws -> UInt64? {
        let meta = try env.openDatabase("meta")
        guard let version = try storedFormat(env: env, meta: meta) else { throw LogError.notAStore(path: env.path) }
        if version == formatVersion { return nil }
        if version > formatVersion { throw LogError.newerFormat(found: version, supported: formatVersion) }
        // Each step records the version it reaches, so an interrupted
        // upgrade resumes at the step it was in. Format 1 goes to the
        // layout of format 4 in one step.
        let steps: [UInt64] = version == 1 ? [1] + Array(4..<formatVersion) : Array(version..<formatVersion)
        // One progress over every step: the entries each step copies, added up.
        let totals = try steps.map { try entriesToCopy(from: $0, env: env) }
        let total = totals.reduce(0, +)
        var before = 0
        for (step, stepTotal) in zip(steps, totals) {
            let offset = before
            let overall = progress.map { report in { (done: Int, _: Int) in report(offset + done, total) } }
            switch step {
            case 1: try upgradeFromFormat1(env: env, meta: meta, sliceSize: sliceSize, progress: overall, isCancelled: isCancelled)
            case 2: try upgradeFromFormat2(env: env, meta: meta, sliceSize: sliceSize, progress: overall, isCancelled: isCancelled)
            case 3: try upgradeFromFormat3(env: env, meta: meta, sliceSize: sliceSize, progress: overall, isCancelled: isCancelled)
            case 4: try upgradeFromFormat4(env: env, meta: meta, isCancelled: isCancelled)
            default: throw LogError.corrupt("unknown format version \(step)")
            }
            before += stepTotal
        }
        return version
    }

    /// How many entries the upgrade step from format `version` copies: the
    /// events, feed positions or id index entries of the old layout (none
    /// from format 4).
    static func entriesToCopy(from version: UInt64, env: Environment) throws -> Int {
        if version == 4 { return 0 }
        let old = try env.openDatabase(version == 1 ? "arrivals" : version == 2 ? "positions" : "ids")
        return try env.read { txn in try txn.count(old) }
    }

    /// Format 1 kept envelopes under their ids (`events`), feeds as
    /// author ‖ seq → id and an arrival log of ids (Specs/storage.md §4.1).
    static func upgradeFromFormat1(
        env: Environment, meta: Database, sliceSize: Int, progress: ((_ done: Int, _ total: Int) -> Void)?, isCancelled: (() -> Bool)?
    ) throws {
        let oldEvents = try env.openDatabase("events")
        let oldArrivals = try env.openDatabase("arrivals")
        let oldFeeds = try env.openDatabase("feeds")
        let envelopes = try env.openDatabase("envelopes")
        let ids = try env.openDatabase(idsName, fixedSizeDuplicates: true)
        let positions = try env.openDatabase(positionsName, fixedSizeDuplicates: true)
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
                    try txn.putDuplicate(ids, idPrefix(id), arrivalKey, last: true)
                    // Feeds are contiguous and arrivals follow each feed's
                    // order, so each position is its feed's greatest so far.
                    do {
                        try txn.putDuplicate(positions, event.author.bytes, encodeU64(event.seq) + arrivalKey, last: true)
                    } catch {
                        throw LogError.corrupt("format 1 feed \(event.author.hex) is out of order at #\(event.seq): \(error)")
                    }
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
            try txn.put(meta, formatKey, encodeU64(4))
        }
    }

    /// Format 2 kept feed positions as one entry per event, author ‖ seq →
    /// arrival (`positions`); format 3 keeps them as 16-byte values under
    /// their author (`feed_positions`, Specs/storage.md §4.2). Nothing else
    /// changes: arrival positions, and so the projections, stay as they are.
    /// Records format 3; `upgradeFromFormat3` follows.
    static func upgradeFromFormat2(
        env: Environment, meta: Database, sliceSize: Int, progress: ((_ done: Int, _ total: Int) -> Void)?, isCancelled: (() -> Bool)?
    ) throws {
        let old = try env.openDatabase("positions")
        let positions = try env.openDatabase(positionsName, fixedSizeDuplicates: true)
        let total = try env.read { txn in try txn.count(old) }

        while true {
            if isCancelled?() == true { throw CancellationError() }
            let (copied, done) = try env.write { txn -> (Int, Int) in
                // Resume after the last position a previous slice committed:
                // the old entries are copied in key order (author, seq).
                let start = try txn.last(positions).map { last -> [UInt8] in
                    let (seq, _) = try decodePosition(last.value)
                    return last.key + encodeU64(seq + 1)
                }
                var copied = 0
                try txn.scan(old, from: start) { key, value in
                    guard key.count == 40, value.count == 8 else {
                        throw LogError.corrupt("format 2 feed position with a key of \(key.count) and a value of \(value.count) bytes")
                    }
                    do {
                        try txn.putDuplicate(positions, Array(key[0..<32]), Array(key[32..<40]) + value, last: true)
                    } catch {
                        throw LogError.corrupt("format 2 feed positions out of order at \(Hex.encode(key)): \(error)")
                    }
                    copied += 1
                    return copied < sliceSize
                }
                return (copied, try txn.count(positions))
            }
            progress?(done, total)
            if copied < sliceSize { break }
        }

        try env.write { txn in
            let copied = try txn.count(positions)
            guard copied == total else {
                throw LogError.corrupt(
                    "format 2 store is inconsistent: \(total) feed positions, \(copied) copied; run `chorus-replay verify` on a copy")
            }
            try txn.drop(old)
            try txn.put(meta, formatKey, encodeU64(3))
        }
    }

    /// Where an interrupted format 3 upgrade resumes: after this id of the
    /// old index (Specs/storage.md §4.3).
    static let idsUpgradeKey = Array("upgrade_ids_after".utf8)

    /// Format 3 kept the id index under whole ids (`ids`: id → arrival);
    /// format 4 keeps it under their first 8 bytes (`id_prefixes`,
    /// Specs/storage.md §4.3). Nothing else changes.
    static func upgradeFromFormat3(
        env: Environment, meta: Database, sliceSize: Int, progress: ((_ done: Int, _ total: Int) -> Void)?, isCancelled: (() -> Bool)?
    ) throws {
        let old = try env.openDatabase("ids")
        let ids = try env.openDatabase(idsName, fixedSizeDuplicates: true)
        let total = try env.read { txn in try txn.count(old) }

        while true {
            if isCancelled?() == true { throw CancellationError() }
            let (copied, done) = try env.write { txn -> (Int, Int) in
                // The old entries are copied in key order, so their prefixes
                // come in order: a new prefix is appended (pages filled in
                // order), one seen before (two ids sharing 8 bytes) added
                // beside it.
                let after = try txn.get(meta, idsUpgradeKey)
                var lastPrefix = try txn.last(ids)?.key
                var copied = 0
                var lastCopied: [UInt8]? = nil
                try txn.scan(old, from: after.map { $0 + [0] }) { key, value in
                    guard key.count == 32, value.count == 8 else {
                        throw LogError.corrupt("format 3 id index entry with a key of \(key.count) and a value of \(value.count) bytes")
                    }
                    let prefix = Array(key[0..<8])
                    if prefix == lastPrefix {
                        try txn.putDuplicate(ids, prefix, value, last: false)
                    } else {
                        try txn.put(ids, prefix, value, append: true)
                        lastPrefix = prefix
                    }
                    lastCopied = key
                    copied += 1
                    return copied < sliceSize
                }
                if let lastCopied { try txn.put(meta, idsUpgradeKey, lastCopied) }
                return (copied, try txn.count(ids))
            }
            progress?(done, total)
            if copied < sliceSize { break }
        }

        try env.write { txn in
            let copied = try txn.count(ids)
            guard copied == total else {
                throw LogError.corrupt(
                    "format 3 store is inconsistent: \(total) id index entries, \(copied) copied; run `chorus-replay verify` on a copy")
            }
            try txn.drop(old)
            _ = try txn.delete(meta, idsUpgradeKey)
            try txn.put(meta, formatKey, encodeU64(4))
        }
    }

    /// Format 4 kept the id index in one level (`id_prefixes`); format 5
    /// adds its recent level (`id_recent`, Specs/storage.md §4.4), which
    /// starts empty: every event stays listed where it is. Nothing is copied.
    static func upgradeFromFormat4(env: Environment, meta: Database, isCancelled: (() -> Bool)?) throws {
        if isCancelled?() == true { throw CancellationError() }
        let recent = try env.openDatabase(recentIDsName, fixedSizeDuplicates: true)
        try env.write { txn in
            // Empty already, unless something other than Chorus wrote it.
            try txn.clear(recent)
            try txn.put(meta, formatKey, encodeU64(5))
        }
    }
}
