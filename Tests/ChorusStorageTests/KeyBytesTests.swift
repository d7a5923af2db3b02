import ChorusStorage
import Testing

@Suite("Big-endian key bytes (ChorusStorage)")
struct KeyBytesTests {
    @Test func eightBytesMostSignificantFirstSoByteOrderIsNumericOrder() {
        #expect(bigEndianBytes(0) == [0, 0, 0, 0, 0, 0, 0, 0])
        #expect(bigEndianBytes(0x0102_0304_0506_0708) == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(bigEndianBytes(.max) == [UInt8](repeating: 0xFF, count: 8))
        let numbers: [UInt64] = [0, 1, 255, 256, 65_535, 1 << 32, (1 << 56) - 1, 1 << 56, .max]
        for (a, b) in zip(numbers, numbers.dropFirst()) {
            #expect(bigEndianBytes(a).lexicographicallyPrecedes(bigEndianBytes(b)))
        }
    }
}
