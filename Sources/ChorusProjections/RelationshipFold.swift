import ChorusCBOR
import ChorusCrypto
import ChorusEvents

extension FoldRun {
    /// Follows, likes and blocks: add-wins observed-remove sets. A removal
    /// cancels exactly the adds it names that were made by the same user; an
    /// add it did not see survives (Specs/projections.md §6.4).
    ///
    /// With `only`, folds just the facts `refolds` takes in and rewrites
    /// only those users' edges. Exact, because an edge and every decision
    /// under this target read only facts of one acting user (a removal
    /// cancels only adds by its own user) (§9.1).
    /// Whether this fold reads the payload of a fact of `kind`: an add's
    /// payload is empty; only a removal's names what it saw.
    static func relationshipReadsPayload(_ kind: EventKind) -> Bool { !isAdd(kind) }

    mutating func foldRelationship(
        _ cls: ObjectClass, _ target: Bytes32, only: (users: Set<PublicKey>, new: Set<EventID>)? = nil
    ) throws {
        var adds: [EventID: (user: PublicKey, arrival: UInt64)] = [:]
        var cancelled: Set<EventID> = []
        var all: [(fact: Fact, actor: Result<PublicKey, NoEffect>)] = []
        for f in try facts(cls, target, payloadNeeded: Self.relationshipReadsPayload) {
            let actor = try actor(f)
            if let only, !refolds(f, actor: try? actor.get(), only: only) { continue }
            all.append((f, actor))
        }
        for (f, actor) in all where Self.isAdd(f.kind) {
            switch actor {
            case .failure(let why): try decide(f, why)
            case .success(let user) where user == target && cls != .like:
                try decide(f, NoEffect("self", "a user cannot \(cls == .follow ? "follow" : "block") themself"))
            case .success(let user):
                adds[f.id] = (user, f.arrival)
                try decide(f, nil)
            }
        }
        for (f, actor) in all where !Self.isAdd(f.kind) {
            switch actor {
            case .failure(let why): try decide(f, why)
            case .success(let user):
                let seen = try Self.seen(by: f)
                var matched = false
                for id in seen where adds[id]?.user == user {
                    cancelled.insert(id)
                    matched = true
                }
                try decide(
                    f,
                    matched ? nil : NoEffect("nothing_to_remove", "names no add by the same user that this node holds"))
            }
        }
        // Each user's live adds, by arrival position (§9.1).
        var live: [PublicKey: [UInt64]] = [:]
        for (id, add) in adds where !cancelled.contains(id) { live[add.user, default: []].append(add.arrival) }
        if let only {
            for user in only.users {
                let arrivals = (live[user] ?? []).sorted()
                if try liveAdds(cls, target, user) != arrivals { try setLiveAdds(cls, target, user, arrivals) }
            }
            return
        }

        let prefix = Table.edge.key(cls.rawValue, target)
        var oldActors: Set<PublicKey> = []
        // A bulk fold starts from empty state (§9.2): no edges to read.
        if !bulk {
            try txn.scan(p.state, prefix: prefix) { key, _ in
                oldActors.insert(try Codec.b32(key[34...], "edge actor"))
                return true
            }
        }
        // Only the actors that start or stop relating change their
        // `edgeOut` entry: a popular picture has thousands of likers.
        let newActors = Set(live.keys)
        if cls == .block { for actor in oldActors.symmetricDifference(newActors) { blocksChanged(of: actor) } }
        for actor in oldActors.subtracting(newActors) { try deleteState(Table.edgeOut.key(cls.rawValue, actor, target)) }
        for actor in newActors.subtracting(oldActors) { try putState(Table.edgeOut.key(cls.rawValue, actor, target), []) }
        var entries: [StateKey: [UInt8]] = [:]
        for (user, arrivals) in live { entries[StateKey(Table.edge.key(cls.rawValue, target, user))] = Self.edgeValue(arrivals) }
        try replace(prefix: prefix, with: entries)
    }

    static func isAdd(_ kind: EventKind) -> Bool {
        kind == .followAdded || kind == .likeAdded || kind == .blockAdded
    }
}

extension FoldRun {
    /// Folds one new relationship fact into the stored edges, giving the
    /// same state and decisions as `foldRelationship` would from all facts:
    /// an add joins its actor's live adds unless a removal by the same user
    /// already names it; a removal takes the adds it names out of its
    /// actor's live adds. The `relationshipCancel` index entries (the
    /// removals naming each add) and the log's id index (the adds a removal
    /// names) make this possible without reading the target's other facts
    /// (a popular picture has thousands).
    mutating func foldRelationshipFact(_ cls: ObjectClass, _ target: Bytes32, _ f: Fact) throws {
        guard let user = try actingUserOrRecord(f) else { return }
        if Self.isAdd(f.kind) {
            if user == target && cls != .like {
                return try decide(f, NoEffect("self", "a user cannot \(cls == .follow ? "follow" : "block") themself"))
            }
            var cancelled = false
            var removers: [MergeOrder] = []
            try txn.scan(p.index, prefix: IndexTable.relationshipCancel.key(cls.rawValue, target, f.id)) { key, _ in
                removers.append(try MergeOrder(bytes: key[(key.count - 72)...]))
                return true
            }
            for remover in removers where try actingUser(remover.author, at: remover.hlc) == user {
                cancelled = true
                // It now names an add of its user.
                guard let arrival = try p.log.readArrival(of: remover.id, in: txn) else {
                    throw ProjectionError.corrupt("the remover \(remover.id.short) the cancel index names is not in the log")
                }
                try decide(remover.id, at: arrival, nil)
            }
            if !cancelled {
                var arrivals = try liveAdds(cls, target, user)
                if !arrivals.contains(f.arrival) {
                    arrivals.append(f.arrival)
                    try setLiveAdds(cls, target, user, arrivals)
                }
            }
            return try decide(f, nil)
        }
        let seen = try Self.seen(by: f)
        var matched = false
        var arrivals = try liveAdds(cls, target, user)
        let before = arrivals.count
        for named in seen {
            guard let add = try heldAdd(cls, target, named) else { continue }
            guard try actingUser(add.author, at: add.hlc) == user, user != target || cls == .like else { continue }
            matched = true
            arrivals.removeAll { $0 == add.arrival }
        }
        if arrivals.count != before { try setLiveAdds(cls, target, user, arrivals) }
        try decide(f, matched ? nil : NoEffect("nothing_to_remove", "names no add by the same user that this node holds"))
    }

    /// The add of class `cls` on `target` with id `id`, when the log holds
    /// one (Specs/projections.md §9.1): a removal names adds by id, and
    /// names of other events, or of adds on other targets, match nothing.
    func heldAdd(_ cls: ObjectClass, _ target: Bytes32, _ id: EventID) throws -> (author: PublicKey, hlc: HLC, arrival: UInt64)? {
        guard let arrival = try p.log.readArrival(of: id, in: txn) else { return nil }
        // `readArrival` found the event whose id this is.
        let event = try p.log.readTrusted(at: arrival, in: txn)
        guard Self.isAdd(event.kind), ObjectClass.targets(of: event).contains(where: { $0 == cls && $1 == target }) else { return nil }
        return (event.author, event.hlc, arrival)
    }

    /// The arrival positions of `user`'s live adds of `cls` on `target`, in
    /// order: the stored `edge` value (§9.1).
    func liveAdds(_ cls: ObjectClass, _ target: Bytes32, _ user: PublicKey) throws -> [UInt64] {
        guard let raw = try txn.get(p.state, Table.edge.key(cls.rawValue, target, user)) else { return [] }
        return try Self.edgeArrivals(raw)
    }

    mutating func setLiveAdds(_ cls: ObjectClass, _ target: Bytes32, _ user: PublicKey, _ arrivals: [UInt64]) throws {
        if cls == .block { blocksChanged(of: user) }
        let edge = Table.edge.key(cls.rawValue, target, user)
        let out = Table.edgeOut.key(cls.rawValue, user, target)
        if arrivals.isEmpty {
            try txn.delete(p.state, edge)
            try txn.delete(p.state, out)
        } else {
            try txn.put(p.state, edge, Self.edgeValue(arrivals))
            try txn.put(p.state, out, [])
        }
    }

    /// The stored value of an `edge` entry: the live adds' arrival
    /// positions, u64be each, in increasing order (Specs/projections.md §9.1).
    static func edgeValue(_ arrivals: [UInt64]) -> [UInt8] { arrivals.sorted().flatMap { Codec.u64($0) } }

    static func edgeArrivals(_ raw: [UInt8]) throws -> [UInt64] {
        guard !raw.isEmpty, raw.count % 8 == 0 else { throw ProjectionError.corrupt("edge value of \(raw.count) bytes") }
        return stride(from: 0, to: raw.count, by: 8).map { Codec.readU64(raw[$0..<$0 + 8]) }
    }

    /// The adds a removal held with its payload names (none when it is purged).
    static func seen(kind: EventKind, payload: CBORValue?) -> [EventID] {
        guard let payload else { return [] }
        switch kind {
        case .followRemoved: return (try? FollowRemovedPayload(reading: payload))?.seen ?? []
        case .likeRemoved: return (try? LikeRemovedPayload(reading: payload))?.seen ?? []
        case .blockRemoved: return (try? BlockRemovedPayload(reading: payload))?.seen ?? []
        default: return []
        }
    }

    /// The adds a removal names (its typed payload's `seen`, Specs/events.md
    /// §6.2); a removal held without its payload cannot be folded.
    static func seen(by f: Fact) throws -> [EventID] {
        switch f.kind {
        case .followRemoved: try f.read(FollowRemovedPayload.self).seen
        case .likeRemoved: try f.read(LikeRemovedPayload.self).seen
        case .blockRemoved: try f.read(BlockRemovedPayload.self).seen
        default: throw ProjectionError.corrupt("\(f.kind.name) is not a removal")
        }
    }
}
