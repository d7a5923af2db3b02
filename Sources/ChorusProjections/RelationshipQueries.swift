import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

extension Projections {
    // MARK: Relationships

    func targets(_ cls: ObjectClass, of actor: PublicKey, in txn: Transaction) throws -> [PublicKey] {
        var out: [PublicKey] = []
        try txn.scan(state, prefix: Table.edgeOut.key(cls.rawValue, actor)) { key, _ in
            out.append(try Codec.b32(key.suffix(32), "edge target"))
            return true
        }
        return out
    }

    func actors(_ cls: ObjectClass, on target: Bytes32, in txn: Transaction) throws -> [PublicKey] {
        var out: [PublicKey] = []
        try txn.scan(state, prefix: Table.edge.key(cls.rawValue, target)) { key, _ in
            out.append(try Codec.b32(key.suffix(32), "edge actor"))
            return true
        }
        return out
    }

    /// Up to `limit` keys in key order whose entries are `prefix` and a
    /// 32-byte key, after `after` (the last key of the previous page),
    /// those `keep` keeps: the cost follows the page, not the list.
    func page(
        _ prefix: [UInt8], after: Bytes32?, limit: Int, in txn: Transaction, keep: (PublicKey) throws -> Bool = { _ in true }
    ) throws -> [PublicKey] {
        var out: [PublicKey] = []
        guard limit > 0 else { return out }
        // Every key under the prefix has the same length, so the first one
        // past `after` is at or after `after` followed by a zero byte.
        try txn.scan(state, from: after.map { prefix + $0.bytes + [0] } ?? prefix) { key, _ in
            guard key.starts(with: prefix), key.count == prefix.count + 32 else { return false }
            let k = try Codec.b32(key.suffix(32), "listed key")
            if try keep(k) { out.append(k) }
            return out.count < limit
        }
        return out
    }

    /// A page of `followers(of:)`: up to `limit` users in key order after `after`.
    package func followers(of user: UserID, after: UserID?, limit: Int) throws -> [UserID] {
        try log.env.read { txn in
            let blocks = Table.edgeOut.key(ObjectClass.block.rawValue, user.raw)
            return try page(Table.edge.key(ObjectClass.follow.rawValue, user.raw), after: after?.raw, limit: limit, in: txn) {
                try txn.get(state, blocks + $0.bytes) == nil
            }.map(UserID.init)
        }
    }

    /// A page of `following(of:)`: up to `limit` users in key order after `after`.
    package func following(of user: UserID, after: UserID?, limit: Int) throws -> [UserID] {
        try log.env.read { txn in
            try page(Table.edgeOut.key(ObjectClass.follow.rawValue, user.raw), after: after?.raw, limit: limit, in: txn).map(UserID.init)
        }
    }

    /// A page of `likes(of:)`: up to `limit` users in key order after `after`.
    package func likes<Object: Likeable>(of object: Object, after: UserID?, limit: Int) throws -> [UserID] {
        try likes(of: object.raw, after: after, limit: limit)
    }

    package func likes(of object: Bytes32, after: UserID?, limit: Int) throws -> [UserID] {
        try log.env.read { txn in
            if case .deleted = try lookup(object, in: txn) { return [] }
            return try page(Table.edge.key(ObjectClass.like.rawValue, object), after: after?.raw, limit: limit, in: txn).map(UserID.init)
        }
    }

    /// Users following `user`, leaving out those `user` blocked.
    package func followers(of user: UserID) throws -> [UserID] {
        try followers(of: user.raw).map(UserID.init)
    }

    package func followers(of user: PublicKey) throws -> [PublicKey] {
        try log.env.read { txn in
            let blocked = Set(try targets(.block, of: user, in: txn))
            return try actors(.follow, on: user, in: txn).filter { !blocked.contains($0) }
        }
    }

    /// Users `user` follows now, in key order (bytewise).
    package func following(of user: UserID) throws -> [UserID] {
        try following(of: user.raw).map(UserID.init)
    }

    package func following(of user: PublicKey) throws -> [PublicKey] {
        try log.env.read { txn in try targets(.follow, of: user, in: txn) }
    }

    /// Users `user` blocks now, in key order (bytewise).
    package func blocked(by user: UserID) throws -> [UserID] {
        try blocked(by: user.raw).map(UserID.init)
    }

    package func blocked(by user: PublicKey) throws -> [PublicKey] {
        try log.env.read { txn in try targets(.block, of: user, in: txn) }
    }

    /// Users who like a picture or message; empty once a picture is deleted.
    package func likes<Object: Likeable>(of object: Object) throws -> [UserID] {
        try likes(of: object.raw).map(UserID.init)
    }

    package func likes(of object: Bytes32) throws -> [PublicKey] {
        try log.env.read { txn in
            if case .deleted = try lookup(object, in: txn) { return [] }
            return try actors(.like, on: object, in: txn)
        }
    }

    /// The live add events of `actor`'s edge to `target`: what a removal
    /// must name to cancel it.
    package func liveAdds(_ kind: EventKind, from actor: PublicKey, to target: Bytes32) throws -> [EventID] {
        let cls: ObjectClass =
            switch kind {
            case .followAdded, .followRemoved: .follow
            case .likeAdded, .likeRemoved: .like
            default: .block
            }
        return try log.env.read { txn in
            guard let raw = try txn.get(state, Table.edge.key(cls.rawValue, target, actor)) else { return [] }
            return try edgeAddIDs(raw, in: txn)
        }
    }
}
