/// A CBOR data item restricted to the deterministic subset Chorus uses
/// (Specs/events.md §2): integers, byte and text strings, arrays, maps,
/// `false`, `true` and `null`. Floats, tags, `undefined` and other simple
/// values have no representation here, so they cannot be produced by accident.
public enum CBORValue: Hashable, Sendable {
    case unsigned(UInt64)
    /// A negative integer whose value is `-1 - n` (CBOR major type 1).
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    /// Entries in the order they were given or decoded; the encoder sorts
    /// them canonically, the decoder only accepts them already sorted.
    case map([CBORMapEntry])
    case bool(Bool)
    case null
}

public struct CBORMapEntry: Hashable, Sendable {
    public var key: CBORValue
    public var value: CBORValue
    public init(_ key: CBORValue, _ value: CBORValue) {
        self.key = key
        self.value = value
    }
}

extension CBORValue {
    public init(_ int: Int64) {
        self = int >= 0 ? .unsigned(UInt64(int)) : .negative(UInt64(-1 - int))
    }

    /// A map keyed by text strings, the shape of every Chorus payload.
    public static func textMap(_ pairs: [(String, CBORValue)]) -> CBORValue {
        .map(pairs.map { CBORMapEntry(.text($0.0), $0.1) })
    }

    public var unsignedValue: UInt64? {
        if case .unsigned(let v) = self { return v }
        return nil
    }
    public var bytesValue: [UInt8]? {
        if case .bytes(let v) = self { return v }
        return nil
    }
    public var textValue: String? {
        if case .text(let v) = self { return v }
        return nil
    }
    public var arrayValue: [CBORValue]? {
        if case .array(let v) = self { return v }
        return nil
    }
    public var mapEntries: [CBORMapEntry]? {
        if case .map(let v) = self { return v }
        return nil
    }
    public var boolValue: Bool? {
        if case .bool(let v) = self { return v }
        return nil
    }
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// Looks a key up in a map (linear: Chorus maps are small).
    public subscript(key: CBORValue) -> CBORValue? {
        guard case .map(let entries) = self else { return nil }
        return entries.first(where: { $0.key == key })?.value
    }
    public subscript(text key: String) -> CBORValue? { self[.text(key)] }
    public subscript(int key: UInt64) -> CBORValue? { self[.unsigned(key)] }
}
