@testable import ChorusStorage
import Testing

/// Regions and index prefixes hash their bytes in blocks
/// (`KeyRegion.hash(into:)`, `PrefixKey`): equal values must hash equally
/// wherever their bytes sit, and unequal ones must stay apart.
@Suite("Observation: region hashing")
struct RegionHashingTests {
    @Test("a prefix cut from a longer key finds what was indexed under the same bytes")
    func prefixesFromAnyOffsetMatch() {
        let key: [UInt8] = [9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
        let shared: [UInt8] = [1, 2, 3, 4]
        var index: [PrefixKey: Int] = [PrefixKey(shared[...]): 1]
        #expect(index[PrefixKey(key[1..<5])] == 1, "the same bytes at another offset of another array")
        #expect(PrefixKey(key[1..<5]).hashValue == PrefixKey(shared[...]).hashValue)
        #expect(index[PrefixKey(key[1..<4])] == nil && index[PrefixKey(key[0..<4])] == nil)
        index[PrefixKey([][...])] = 2
        #expect(index[PrefixKey(key[3..<3])] == 2, "the empty prefix (a whole-database scan)")
    }

    @Test("equal regions are one set member; regions that differ in any field are not")
    func regionsHashByEveryByte() {
        let a = KeyRegion.point(3, [1, 2, 3])
        let same = KeyRegion.point(3, Array([0, 1, 2, 3, 4][1..<4]))
        #expect(a == same && a.hashValue == same.hashValue)
        let others = [
            KeyRegion.point(4, [1, 2, 3]), KeyRegion.point(3, [1, 2, 4]), KeyRegion.prefix(3, [1, 2, 3]),
            KeyRegion.prefix(3, [1, 2, 3], upper: [1, 2, 3, 0]), KeyRegion.all(3),
        ]
        let set = Set([a, same] + others)
        #expect(set.count == 1 + others.count - 1, "prefix [1,2,3] up to [1,2,3,0] is the point region")
        #expect(set.contains(KeyRegion.point(3, [1, 2, 3])))
    }
}
