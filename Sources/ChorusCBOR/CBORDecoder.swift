/// Why a byte string is not a canonical Chorus CBOR item. Every case names
/// the byte offset where the problem starts, so a report can point at it.
package enum CBORError: Error, Hashable, Sendable, CustomStringConvertible {
    case truncated(offset: Int)
    case nonCanonicalInteger(offset: Int)
    case indefiniteLength(offset: Int)
    case floatNotAllowed(offset: Int)
    case tagNotAllowed(offset: Int)
    case simpleValueNotAllowed(offset: Int)
    case reservedAdditionalInfo(offset: Int)
    case unsortedMapKeys(offset: Int)
    case duplicateMapKey(offset: Int)
    case invalidUTF8(offset: Int)
    case trailingBytes(offset: Int)
    case nestingTooDeep(offset: Int)
    case lengthBeyondInput(offset: Int)

    /// A stable machine-readable code, used by the test vectors.
    package var code: String {
        switch self {
        case .truncated: "truncated"
        case .nonCanonicalInteger: "non_canonical_integer"
        case .indefiniteLength: "indefinite_length"
        case .floatNotAllowed: "float_not_allowed"
        case .tagNotAllowed: "tag_not_allowed"
        case .simpleValueNotAllowed: "simple_value_not_allowed"
        case .reservedAdditionalInfo: "reserved_additional_info"
        case .unsortedMapKeys: "unsorted_map_keys"
        case .duplicateMapKey: "duplicate_map_key"
        case .invalidUTF8: "invalid_utf8"
        case .trailingBytes: "trailing_bytes"
        case .nestingTooDeep: "nesting_too_deep"
        case .lengthBeyondInput: "length_beyond_input"
        }
    }

    /// The byte offset, relative to the decoded input, where the problem starts
    /// (Specs/events.md §2.2). Informative only: implementations must agree on
    /// ``code``, not on the offset.
    package var offset: Int {
        switch self {
        case .truncated(let o), .nonCanonicalInteger(let o), .indefiniteLength(let o),
            .floatNotAllowed(let o), .tagNotAllowed(let o), .simpleValueNotAllowed(let o),
            .reservedAdditionalInfo(let o), .unsortedMapKeys(let o), .duplicateMapKey(let o),
            .invalidUTF8(let o), .trailingBytes(let o), .nestingTooDeep(let o),
            .lengthBeyondInput(let o):
            o
        }
    }

    /// A human-readable message naming the offset and the violated rule, for
    /// example `non-canonical CBOR at byte 3: duplicate map key`.
    package var description: String {
        let what: String =
            switch self {
            case .truncated: "input ends inside a data item"
            case .nonCanonicalInteger: "integer or length not in its shortest encoding"
            case .indefiniteLength: "indefinite-length item (only definite lengths are canonical)"
            case .floatNotAllowed: "floating-point value (not allowed)"
            case .tagNotAllowed: "tagged value (tags are not allowed)"
            case .simpleValueNotAllowed: "simple value other than false, true or null"
            case .reservedAdditionalInfo: "reserved additional-information value"
            case .unsortedMapKeys: "map keys not in canonical (bytewise) order"
            case .duplicateMapKey: "duplicate map key"
            case .invalidUTF8: "text string is not valid UTF-8"
            case .trailingBytes: "trailing bytes after the data item"
            case .nestingTooDeep: "items nested deeper than \(CBORDecoder.maxDepth) levels"
            case .lengthBeyondInput: "declared length exceeds the remaining input"
            }
        return "non-canonical CBOR at byte \(offset): \(what)"
    }
}

/// A strict decoder: it accepts exactly the byte strings `CBOREncoder`
/// produces, so one logical value has one encoding.
package struct CBORDecoder {
    /// The deepest nesting allowed: the top-level item has depth 0, and an item
    /// deeper than 16 fails with ``CBORError/nestingTooDeep(offset:)``
    /// (Specs/events.md §2.1, rule 6).
    package static let maxDepth = 16

    private let bytes: [UInt8]
    /// The position of the next byte to read; after a successful decode it is the
    /// offset just past the item returned.
    package private(set) var offset: Int
    private let end: Int

    /// Creates a decoder reading `bytes` from `offset` (0 by default), for
    /// walking a CBOR sequence item by item with ``decodeNext()``.
    package init(_ bytes: [UInt8], offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
        self.end = bytes.count
    }

    /// Decodes exactly one item spanning the whole input.
    package static func decode(_ bytes: [UInt8]) throws(CBORError) -> CBORValue {
        var decoder = CBORDecoder(bytes)
        let value = try decoder.decodeNext()
        if decoder.offset != bytes.count { throw .trailingBytes(offset: decoder.offset) }
        return value
    }

    /// Whether every byte of the input has been consumed; the loop condition
    /// when reading a CBOR sequence.
    package var isAtEnd: Bool { offset >= end }

    /// Decodes the next item of a CBOR sequence.
    package mutating func decodeNext() throws(CBORError) -> CBORValue {
        try decodeItem(depth: 0)
    }

    /// Returns the bytes of the next item without building a value tree
    /// beyond what validation needs; used to slice CBOR sequences.
    package mutating func nextItemBytes() throws(CBORError) -> (value: CBORValue, range: Range<Int>) {
        let start = offset
        let value = try decodeItem(depth: 0)
        return (value, start..<offset)
    }

    private mutating func readByte() throws(CBORError) -> UInt8 {
        guard offset < end else { throw .truncated(offset: offset) }
        let b = bytes[offset]
        offset += 1
        return b
    }

    /// Reads the argument of a head whose initial byte was at `start`, enforcing the shortest form.
    private mutating func readArgument(info: UInt8, start: Int) throws(CBORError) -> UInt64 {
        switch info {
        case 0..<24:
            return UInt64(info)
        case 24...27:
            let width = 1 << Int(info - 24)
            guard end - offset >= width else { throw .truncated(offset: offset) }
            var n: UInt64 = 0
            for i in 0..<width { n = (n << 8) | UInt64(bytes[offset + i]) }
            offset += width
            let minimum: UInt64 =
                switch info {
                case 24: 24
                case 25: 0x100
                case 26: 0x1_0000
                default: 0x1_0000_0000
                }
            if n < minimum { throw .nonCanonicalInteger(offset: start) }
            return n
        case 31:
            throw .indefiniteLength(offset: start)
        default:
            throw .reservedAdditionalInfo(offset: start)
        }
    }

    private mutating func decodeItem(depth: Int) throws(CBORError) -> CBORValue {
        let start = offset
        if depth > Self.maxDepth { throw .nestingTooDeep(offset: start) }
        let initial = try readByte()
        let major = initial >> 5
        let info = initial & 0x1f
        switch major {
        case 0:
            return .unsigned(try readArgument(info: info, start: start))
        case 1:
            return .negative(try readArgument(info: info, start: start))
        case 2, 3:
            let n = try readArgument(info: info, start: start)
            guard n <= UInt64(end - offset) else { throw .lengthBeyondInput(offset: start) }
            let body = bytes[offset..<offset + Int(n)]
            offset += Int(n)
            if major == 2 { return .bytes(Array(body)) }
            // Decoding repairs ill-formed UTF-8 (each bad sequence becomes
            // U+FFFD, itself three bytes that differ from it), so the text
            // is valid exactly when its UTF-8 is the input. Not
            // `String(validating:as:)`: it is unspecialised, and looked up
            // generic metadata twice for every text string decoded.
            let text = String(decoding: body, as: UTF8.self)
            guard text.utf8.elementsEqual(body) else { throw .invalidUTF8(offset: start) }
            return .text(text)
        case 4:
            let n = try readArgument(info: info, start: start)
            guard n <= UInt64(end - offset) else { throw .lengthBeyondInput(offset: start) }
            var items: [CBORValue] = []
            items.reserveCapacity(Int(n))
            for _ in 0..<n { items.append(try decodeItem(depth: depth + 1)) }
            return .array(items)
        case 5:
            let n = try readArgument(info: info, start: start)
            guard n <= UInt64(end - offset) / 2 else { throw .lengthBeyondInput(offset: start) }
            var entries: [CBORMapEntry] = []
            entries.reserveCapacity(Int(n))
            var previousKey: Range<Int>? = nil
            for _ in 0..<n {
                let keyStart = offset
                let key = try decodeItem(depth: depth + 1)
                let keyRange = keyStart..<offset
                if let prev = previousKey {
                    let a = bytes[prev], b = bytes[keyRange]
                    if a.elementsEqual(b) { throw .duplicateMapKey(offset: keyStart) }
                    if !a.lexicographicallyPrecedes(b) { throw .unsortedMapKeys(offset: keyStart) }
                }
                previousKey = keyRange
                let value = try decodeItem(depth: depth + 1)
                entries.append(CBORMapEntry(key, value))
            }
            return .map(entries)
        case 6:
            throw .tagNotAllowed(offset: start)
        default:  // major 7
            switch info {
            case 20: return .bool(false)
            case 21: return .bool(true)
            case 22: return .null
            case 25, 26, 27: throw .floatNotAllowed(offset: start)
            case 31: throw .indefiniteLength(offset: start)
            case 28, 29, 30: throw .reservedAdditionalInfo(offset: start)
            default: throw .simpleValueNotAllowed(offset: start)
            }
        }
    }
}
