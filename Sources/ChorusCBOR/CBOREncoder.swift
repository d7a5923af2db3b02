/// Deterministic CBOR encoding (RFC 8949 §4.2.1, "core deterministic"):
/// definite lengths, shortest argument forms, map keys sorted by the
/// bytewise order of their own encodings.
package enum CBOREncoder {
    /// Returns the single canonical encoding of `value`: definite lengths,
    /// shortest-form arguments and map entries sorted by the bytes of their
    /// encoded keys (Specs/events.md §2.1). Never fails.
    package static func encode(_ value: CBORValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        append(value, to: &out)
        return out
    }

    /// Appends the canonical encoding of `value` to `out`, as ``encode(_:)``
    /// would return it; use it to build CBOR sequences without extra copies.
    /// Map entries are sorted here, so callers may give them in any order;
    /// duplicate keys are not detected and would make the output non-canonical.
    package static func append(_ value: CBORValue, to out: inout [UInt8]) {
        switch value {
        case .unsigned(let n): appendHead(major: 0, argument: n, to: &out)
        case .negative(let n): appendHead(major: 1, argument: n, to: &out)
        case .bytes(let b):
            appendHead(major: 2, argument: UInt64(b.count), to: &out)
            out.append(contentsOf: b)
        case .text(let s):
            appendHead(major: 3, argument: UInt64(s.utf8.count), to: &out)
            out.append(contentsOf: s.utf8)
        case .array(let items):
            appendHead(major: 4, argument: UInt64(items.count), to: &out)
            for item in items { append(item, to: &out) }
        case .map(let entries):
            appendHead(major: 5, argument: UInt64(entries.count), to: &out)
            if entries.allSatisfy({ $0.key.isText }) {
                // Text keys (nearly every map) are put in order without
                // encoding each on its own first (projection records are
                // encoded for every object a fold writes).
                for entry in entries.sorted(by: { textKeyPrecedes($0.key, $1.key) }) {
                    append(entry.key, to: &out)
                    append(entry.value, to: &out)
                }
                return
            }
            let encoded = entries.map { (key: encode($0.key), value: $0.value) }
                .sorted { lexicographicallyPrecedes($0.key, $1.key) }
            for entry in encoded {
                out.append(contentsOf: entry.key)
                append(entry.value, to: &out)
            }
        case .bool(let b): out.append(b ? 0xf5 : 0xf4)
        case .null: out.append(0xf6)
        }
    }

    /// Writes a major type and its argument in the shortest form.
    package static func appendHead(major: UInt8, argument n: UInt64, to out: inout [UInt8]) {
        let m = major << 5
        switch n {
        case 0..<24:
            out.append(m | UInt8(n))
        case 24...0xff:
            out.append(m | 24); out.append(UInt8(n))
        case 0x100...0xffff:
            out.append(m | 25)
            out.append(UInt8(n >> 8)); out.append(UInt8(truncatingIfNeeded: n))
        case 0x1_0000...0xffff_ffff:
            out.append(m | 26)
            for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt64(shift))) }
        default:
            out.append(m | 27)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt64(shift))) }
        }
    }

    /// The order of two text keys' encodings: a shorter string's head is
    /// the smaller (shortest-form heads grow with the length they give),
    /// and strings of one length are ordered by their UTF-8 bytes.
    static func textKeyPrecedes(_ a: CBORValue, _ b: CBORValue) -> Bool {
        guard case .text(let a) = a, case .text(let b) = b else { return false }
        let (na, nb) = (a.utf8.count, b.utf8.count)
        return na != nb ? na < nb : a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    static func lexicographicallyPrecedes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.lexicographicallyPrecedes(b)
    }
}

extension CBORValue {
    fileprivate var isText: Bool {
        if case .text = self { return true }
        return false
    }
}
