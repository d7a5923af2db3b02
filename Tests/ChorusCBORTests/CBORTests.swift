import ChorusCBOR
import ChorusTestSupport
import Foundation
import Testing

private func hexBytes(_ s: String) -> [UInt8] {
    var out: [UInt8] = []
    var i = s.startIndex
    while i < s.endIndex {
        let j = s.index(i, offsetBy: 2)
        out.append(UInt8(s[i..<j], radix: 16)!)
        i = j
    }
    return out
}

struct RFCExample: Sendable, CustomTestStringConvertible {
    let hex: String
    let roundtrip: Bool
    var testDescription: String { hex }
}

private func rfcExamples() throws -> [RFCExample] {
    let data = try Data(contentsOf: specVector("cbor/rfc-appendix-a.json"))
    let items = try JSONSerialization.jsonObject(with: data) as! [[String: Any]]
    return items.map { RFCExample(hex: $0["hex"] as! String, roundtrip: $0["roundtrip"] as! Bool) }
}

/// What the strict decoder must say about an example outside Chorus's
/// subset, or nil for an example inside it. The RFC marks the examples that
/// use indefinite lengths as not round-tripping; floats, tags and other
/// simple values are recognised by their initial byte.
private func expectedRejection(_ example: RFCExample) -> String? {
    switch UInt8(example.hex.prefix(2), radix: 16)! {
    case 0xf9, 0xfa, 0xfb: "float_not_allowed"
    case 0xc0...0xdb: "tag_not_allowed"
    case 0xf7, 0xf0, 0xf8: "simple_value_not_allowed"
    default: example.roundtrip ? nil : "indefinite_length"
    }
}

@Suite("CBOR: RFC 8949 Appendix A")
struct RFCAppendixTests {
    @Test("every example decodes and re-encodes byte for byte, or is refused with the specific error",
          arguments: try rfcExamples())
    func example(_ example: RFCExample) throws {
        let bytes = hexBytes(example.hex)
        if let rejection = expectedRejection(example) {
            #expect(throws: CBORError.self) { try CBORDecoder.decode(bytes) }
            do {
                _ = try CBORDecoder.decode(bytes)
            } catch {
                #expect(error.code == rejection, "\(example.hex): \(error)")
            }
        } else {
            let value = try CBORDecoder.decode(bytes)
            #expect(example.roundtrip)
            #expect(CBOREncoder.encode(value) == bytes)
        }
    }

    @Test func decodedValuesMatchTheRFC() throws {
        #expect(try CBORDecoder.decode([0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) == .unsigned(.max))
        #expect(try CBORDecoder.decode([0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) == .negative(.max))
        #expect(try CBORDecoder.decode([0x39, 0x03, 0xe7]) == CBORValue(-1000))
        #expect(try CBORDecoder.decode(hexBytes("63e6b0b4")) == .text("水"))
        #expect(try CBORDecoder.decode(hexBytes("8301820203820405"))
            == .array([.unsigned(1), .array([.unsigned(2), .unsigned(3)]), .array([.unsigned(4), .unsigned(5)])]))
        #expect(try CBORDecoder.decode(hexBytes("a26161016162820203"))
            == .textMap([("a", .unsigned(1)), ("b", .array([.unsigned(2), .unsigned(3)]))]))
        #expect(try CBORDecoder.decode([0xf4, ]) == .bool(false))
        #expect(try CBORDecoder.decode([0xf6]) == .null)
    }
}

@Suite("CBOR: canonical form")
struct CanonicalTests {
    @Test("non-shortest integers and lengths are refused", arguments: [
        "1800", "1817", "190000", "1900ff", "1a0000ffff", "1b00000000ffffffff", "3817", "5801ff", "780161", "980100", "b80100",
    ])
    func nonShortest(_ hex: String) {
        do {
            _ = try CBORDecoder.decode(hexBytes(hex))
            Issue.record("accepted \(hex)")
        } catch {
            #expect(error.code == "non_canonical_integer")
            #expect(error.offset == 0)
        }
    }

    // Text strings are UTF-8 (RFC 8949 §3.1): every ill-formed sequence is
    // refused, whatever its place in the string.
    @Test("text that is not UTF-8 is refused", arguments: [
        "61ff",  // a byte never used in UTF-8
        "6180",  // a lone continuation byte
        "61c3",  // truncated: a two-byte lead at the end
        "6341e282",  // truncated three-byte sequence after a valid byte
        "62c0af",  // overlong encoding of "/"
        "63eda080",  // a UTF-16 surrogate (U+D800)
        "64f4908080",  // beyond U+10FFFF
        "6441c34142",  // a lead byte followed by an ASCII byte
    ])
    func invalidText(_ hex: String) {
        do {
            _ = try CBORDecoder.decode(hexBytes(hex))
            Issue.record("accepted \(hex)")
        } catch {
            #expect(error.code == "invalid_utf8")
            #expect(error.offset == 0)
        }
    }

    @Test func textIsDecodedAsWritten() throws {
        for text in ["", "a", "chat", "é", "€", "𝄞", "mixed ascii, é, € and 𝄞 in one string", String(repeating: "ü", count: 300)] {
            let bytes = CBOREncoder.encode(.text(text))
            #expect(try CBORDecoder.decode(bytes) == .text(text))
        }
        // EF BF BD is U+FFFD itself, valid as written.
        #expect(try CBORDecoder.decode(hexBytes("63efbfbd")) == .text("\u{FFFD}"))
    }

    @Test func shortestFormsAtEveryBoundary() throws {
        for n: UInt64 in [0, 23, 24, 255, 256, 65535, 65536, 0xffff_ffff, 0x1_0000_0000, .max] {
            let bytes = CBOREncoder.encode(.unsigned(n))
            #expect(try CBORDecoder.decode(bytes) == .unsigned(n))
            let expectedLength = n < 24 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : n <= 0xffff_ffff ? 5 : 9
            #expect(bytes.count == expectedLength)
        }
    }

    @Test func textKeysAreSortedByTheirEncodingsAtEveryLength() throws {
        // The encoder orders text keys without encoding them one by one:
        // check it against the rule itself (sort by each key's encoding).
        var rng = SplitMix64(seed: 0xC0DE)
        let alphabet = Array("ab") + ["é", "€", "𝄞"]
        for _ in 0..<200 {
            let keys = Set((0..<Int.random(in: 1...12, using: &rng)).map { _ -> String in
                let length = [0, 1, 2, 3, 22, 23, 24, 25, 255, 256, 300].randomElement(using: &rng) ?? 1
                return String((0..<length).map { _ in alphabet.randomElement(using: &rng) ?? "a" })
            })
            let entries = keys.shuffled(using: &rng).enumerated().map { CBORMapEntry(.text($0.element), .unsigned(UInt64($0.offset))) }
            var expected: [UInt8] = []
            CBOREncoder.appendHead(major: 5, argument: UInt64(entries.count), to: &expected)
            for entry in entries.map({ (key: CBOREncoder.encode($0.key), value: $0.value) }).sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                expected += entry.key + CBOREncoder.encode(entry.value)
            }
            let bytes = CBOREncoder.encode(.map(entries))
            #expect(bytes == expected)
            #expect(try CBORDecoder.decode(bytes).mapEntries?.count == entries.count)
        }
    }

    @Test func mapKeysAreSortedByEncodedBytesAndMustArriveSorted() throws {
        // Shorter encodings sort first: 10 (0x0a) < 100 (0x1864) < "a" (0x6161) < "aa".
        let value = CBORValue.map([
            CBORMapEntry(.text("aa"), .null), CBORMapEntry(.text("a"), .null),
            CBORMapEntry(.unsigned(100), .null), CBORMapEntry(.unsigned(10), .null),
        ])
        let bytes = CBOREncoder.encode(value)
        #expect(bytes == hexBytes("a40af61864f66161f6626161f6"))
        do {
            _ = try CBORDecoder.decode(hexBytes("a21864f60af6"))
            Issue.record("accepted unsorted keys")
        } catch {
            #expect(error == .unsortedMapKeys(offset: 4))
        }
        do {
            _ = try CBORDecoder.decode(hexBytes("a20af60af6"))
            Issue.record("accepted duplicate keys")
        } catch {
            #expect(error == .duplicateMapKey(offset: 3))
        }
    }

    @Test("malformed inputs are refused with their specific error", arguments: [
        ("", "truncated"), ("19ff", "truncated"), ("62c328", "invalid_utf8"), ("0000", "trailing_bytes"),
        ("5a ffffffff", "length_beyond_input"), ("1c", "reserved_additional_info"), ("ff", "indefinite_length"),
        ("f97c00", "float_not_allowed"), ("c100", "tag_not_allowed"), ("f7", "simple_value_not_allowed"),
        ("9bffffffffffffffff", "length_beyond_input"),
    ])
    func malformed(_ hex: String, _ code: String) {
        do {
            _ = try CBORDecoder.decode(hexBytes(hex.replacingOccurrences(of: " ", with: "")))
            Issue.record("accepted \(hex)")
        } catch {
            #expect(error.code == code, "\(hex): \(error)")
        }
    }

    @Test func nestingIsBounded() {
        let deep = [UInt8](repeating: 0x81, count: 17) + [0x00]
        do {
            _ = try CBORDecoder.decode(deep)
            Issue.record("accepted 17 levels")
        } catch {
            #expect(error.code == "nesting_too_deep")
        }
        let ok = [UInt8](repeating: 0x81, count: 16) + [0x00]
        #expect((try? CBORDecoder.decode(ok)) != nil)
    }

    @Test func randomValuesRoundTrip() throws {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<2000 {
            let value = randomValue(&rng, depth: 0)
            let bytes = CBOREncoder.encode(value)
            let decoded = try CBORDecoder.decode(bytes)
            #expect(CBOREncoder.encode(decoded) == bytes)
        }
    }
}


private func randomValue(_ rng: inout SplitMix64, depth: Int) -> CBORValue {
    switch Int.random(in: 0..<(depth > 3 ? 6 : 8), using: &rng) {
    case 0: return .unsigned(UInt64.random(in: 0...UInt64.max, using: &rng) >> UInt64.random(in: 0..<64, using: &rng))
    case 1: return .negative(UInt64.random(in: 0...1000, using: &rng))
    case 2: return .bytes((0..<Int.random(in: 0..<40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
    case 3: return .text(String((0..<Int.random(in: 0..<10, using: &rng)).map { _ in "aé水😀".randomElement(using: &rng)! }))
    case 4: return .bool(Bool.random(using: &rng))
    case 5: return .null
    case 6: return .array((0..<Int.random(in: 0..<4, using: &rng)).map { _ in randomValue(&rng, depth: depth + 1) })
    default:
        var entries: [CBORMapEntry] = []
        var seen = Set<[UInt8]>()
        for _ in 0..<Int.random(in: 0..<4, using: &rng) {
            let key = randomValue(&rng, depth: 5)
            if seen.insert(CBOREncoder.encode(key)).inserted { entries.append(CBORMapEntry(key, randomValue(&rng, depth: depth + 1))) }
        }
        return .map(entries)
    }
}
