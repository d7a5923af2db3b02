import ChorusCBOR
import ChorusCrypto
import ChorusProjections

/// One projection entry that differs between two stores.
public struct StateDifference: Hashable, Sendable {
    public let key: [UInt8]
    /// The value in the first store (nil: absent there).
    public let left: [UInt8]?
    public let right: [UInt8]?
    /// The table and key parts in words.
    public var description: String { Projections.describe(key: key) }
}

public enum StateDiff {
    /// Every state entry that is missing from one store or holds another
    /// value, in key order (a merge walk over both sorted key sets).
    public static func between(_ a: ReplayStore, _ b: ReplayStore) throws -> [StateDifference] {
        let left = try a.env.read { try a.projections.stateEntries(in: $0) }
        let right = try b.env.read { try b.projections.stateEntries(in: $0) }
        var out: [StateDifference] = []
        var i = 0
        var j = 0
        while i < left.count || j < right.count {
            if j == right.count || (i < left.count && left[i].key.lexicographicallyPrecedes(right[j].key)) {
                out.append(StateDifference(key: left[i].key, left: left[i].value, right: nil))
                i += 1
            } else if i == left.count || right[j].key.lexicographicallyPrecedes(left[i].key) {
                out.append(StateDifference(key: right[j].key, left: nil, right: right[j].value))
                j += 1
            } else {
                if left[i].value != right[j].value {
                    out.append(StateDifference(key: left[i].key, left: left[i].value, right: right[j].value))
                }
                i += 1
                j += 1
            }
        }
        return out
    }
}
