import ChorusCBOR
import ChorusCrypto
import ChorusEvents

extension FoldRun {
    /// Follows, likes and blocks: add-wins observed-remove sets. A removal
    /// cancels exactly the adds it names that were made by the same user; an
    /// add it did not see survives (Specs/projections.md §6.4).
    mutating func foldRelationship(_ cls: ObjectClass, _ target: Bytes32) throws {
        var adds: [EventID: PublicKey] = [:]
        var cancelled: Set<EventID> = []
        let all = try facts(cls, target)
        for f in all where Self.isAdd(f.kind) {
            switch try actor(f) {
            case .failure(let why): try decide(f.id, why)
            case .success(let user) where user == target && cls != .like:
                try decide(f.id, NoEffect("self", "a user cannot \(cls == .follow ? "follow" : "block") themself"))
            case .success(let user):
                adds[f.id] = user
                try decide(f.id, nil)
            }
        }
        for f in all where !Self.isAdd(f.kind) {
            switch try actor(f) {
            case .failure(let why): try decide(f.id, why)
            case .success(let user):
                guard let seen = f.payload?[text: "seen"]?.arrayValue else {
                    throw ProjectionError.corrupt("\(f.kind.name) fact without its payload")
                }
                var matched = false
                for id in seen.compactMap(\.id32) where adds[id] == user {
                    cancelled.insert(id)
                    matched = true
                }
                try decide(
                    f.id,
                    matched ? nil : NoEffect("nothing_to_remove", "names no add by the same user that this node holds"))
            }
        }
        var live: [PublicKey: [EventID]] = [:]
        for (id, user) in adds where !cancelled.contains(id) { live[user, default: []].append(id) }

        let prefix = Table.edge.key([cls.rawValue], target.bytes)
        var oldActors: [[UInt8]] = []
        try txn.scan(p.state, prefix: prefix) { key, _ in
            oldActors.append(Array(key[34...]))
            return true
        }
        for actor in oldActors { try txn.delete(p.state, Table.edgeOut.key([cls.rawValue], actor, target.bytes)) }
        var entries: [[UInt8]: [UInt8]] = [:]
        for (user, ids) in live {
            entries[Table.edge.key([cls.rawValue], target.bytes, user.bytes)] = ids.sorted().flatMap(\.bytes)
            try txn.put(p.state, Table.edgeOut.key([cls.rawValue], user.bytes, target.bytes), [])
        }
        try replace(prefix: prefix, with: entries)
    }

    static func isAdd(_ kind: EventKind) -> Bool {
        kind == .followAdded || kind == .likeAdded || kind == .blockAdded
    }
}
