import Foundation

/// A CBOR data item restricted to the deterministic subset Chorus uses
/// (Specs/events.md §2): integers, byte and text strings, arrays, maps,
/// `false`, `true` and `null`. Floats, tags, `undefined` and other simple
/// values have no representation here, so they cannot be produced by accident.
package enum CBORValue: Hashable, Sendable {
    /// A non-negative integer (CBOR major type 0).
    case unsigned(UInt64)
    /// A negative integer whose value is `-1 - n` (CBOR major type 1).
    case negative(UInt64)
    /// A byte string (major type 2).
    case bytes([UInt8])
    /// A UTF-8 text string (major type 3).
    case text(String)
    /// An array of definite length (major type 4).
    case array([CBORValue])
    /// Entries in the order they were given or decoded; the encoder sorts
    /// them canonically, the decoder only accepts them already sorted.
    case map([CBORMapEntry])
    /// `false` or `true` (simple values 20 and 21).
    case bool(Bool)
    /// `null` (simple value 22): an absent or cleared value.
    case null
}

/// One key-value pair of a CBOR map.
package struct CBORMapEntry: Hashable, Sendable {
    /// The entry's key (Chorus uses text or unsigned integer keys).
    package var key: CBORValue
    /// The entry's value.
    package var value: CBORValue
    /// An entry of `key` and `value`.
    package init(_ key: CBORValue, _ value: CBORValue) {
        self.key = key
        self.value = value
    }
}

extension CBORValue {
    /// The integer `int`: `.unsigned` when it is zero or more, else `.negative`.
    package init(_ int: Int64) {
        self = int >= 0 ? .unsigned(UInt64(int)) : .negative(UInt64(-1 - int))
    }

    /// A map keyed by text strings, the shape of every Chorus payload.
    package static func textMap(_ pairs: [(String, CBORValue)]) -> CBORValue {
        .map(pairs.map { CBORMapEntry(.text($0.0), $0.1) })
    }

    /// The value of an `.unsigned` item, else nil.
    package var unsignedValue: UInt64? {
        if case .unsigned(let v) = self { return v }
        return nil
    }
    /// The bytes of a `.bytes` item, else nil.
    package var bytesValue: [UInt8]? {
        if case .bytes(let v) = self { return v }
        return nil
    }
    /// The string of a `.text` item, else nil.
    package var textValue: String? {
        if case .text(let v) = self { return v }
        return nil
    }
    /// The items of an `.array`, else nil.
    package var arrayValue: [CBORValue]? {
        if case .array(let v) = self { return v }
        return nil
    }
    /// The entries of a `.map`, in their stored order, else nil.
    package var mapEntries: [CBORMapEntry]? {
        if case .map(let v) = self { return v }
        return nil
    }
    /// The value of a `.bool` item, else nil.
    package var boolValue: Bool? {
        if case .bool(let v) = self { return v }
        return nil
    }
    /// Whether this is `null`.
    package var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Looks a key up in a map (linear: Chorus maps are small).
    package subscript(key: CBORValue) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first(where: { $0.key == key })?.value
    }
    /// Looks a text key up in a map; nil when absent or not a map.
    package subscript(text key: String) -> CBORValue? { self[.text(key)] }
    /// Looks an unsigned integer key up in a map; nil when absent or not a map.
    package subscript(int key: UInt64) -> CBORValue? { self[.unsigned(key)] }
}

/// A value is kept as its deterministic encoding, base64: lossless for every
/// value (byte strings, integers past JSON's safe range), and read back only
/// if it is canonical, as any Chorus decoder requires.
extension CBORValue: Codable {
    /// Reads the base64 of a canonical encoding.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let data = Data(base64Encoded: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "a CBOR value is the base64 of its encoding")
        }
        do { self = try CBORDecoder.decode(Array(data)) } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a canonical CBOR value: \(error)")
        }
    }

    /// Writes the base64 of the deterministic encoding.
    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Data(CBOREncoder.encode(self)).base64EncodedString())
    }
}
