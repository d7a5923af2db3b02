import ChorusCBOR
import ChorusCrypto
import ChorusEvents
@testable import ChorusProjections
import ChorusTestSupport
import Testing

@Suite("State records: direct encodings equal the canonical CBOR of their maps")
struct RecordTests {
    @Test("a message record, with every combination of its optional fields and arguments of every width")
    func messageRecordEncoding() throws {
        var rng = SplitMix64(seed: 0x5EC0_4D5)
        func key() -> Bytes32 { Bytes32((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })! }
        // Values whose CBOR arguments take 0, 1, 2, 4 and 8 bytes.
        let numbers: [UInt64] = [0, 23, 24, 255, 256, 65_535, 65_536, 4_294_967_295, 4_294_967_296, .max]
        for combination in 0..<(1 << 7) {
            for round in 0..<4 {
                func has(_ bit: Int) -> Bool { combination & (1 << bit) != 0 }
                func number() -> UInt64 { numbers[Int(rng.next() % UInt64(numbers.count))] }
                var record = MessageRecord(sender: key(), device: key(), hlc: HLC(rawValue: number()))
                if has(0) { record.body = (0..<[0, 23, 24, 300][round]).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
                if has(1) { record.blob = key() }
                if has(2) { record.size = number() }
                if has(3) { record.edited = HLC(rawValue: number()) }
                if has(4) { record.editor = key() }
                if has(5) { record.deleted = HLC(rawValue: number()) }
                if has(6) { record.purged = true }
                var map: [(String, CBORValue)] = [
                    ("sender", .bytes(record.sender.bytes)), ("device", .bytes(record.device.bytes)), ("hlc", .unsigned(record.hlc.rawValue)),
                ]
                if let v = record.body { map.append(("body", .bytes(v))) }
                if let v = record.blob { map.append(("blob", .bytes(v.bytes))) }
                if let v = record.size { map.append(("size", .unsigned(v))) }
                if let v = record.edited { map.append(("edited", .unsigned(v.rawValue))) }
                if let v = record.editor { map.append(("editor", .bytes(v.bytes))) }
                if let v = record.deleted { map.append(("deleted", .unsigned(v.rawValue))) }
                if record.purged { map.append(("purged", .bool(true))) }
                let encoded = record.encoded()
                #expect(encoded == CBOREncoder.encode(.textMap(map)), "combination \(combination)")
                #expect(try MessageRecord.decode(encoded) == record, "combination \(combination)")
            }
        }
    }
}
