import ChorusNode

/// Encodes an `Encodable` result into a `JSONValue`, object keys in the
/// order the value encodes them (for synthesized conformances, declaration
/// order) and an absent optional as `null`, so every field of a result's
/// shape is always present (Specs/api.md §5). The command line prints the
/// value with `rendered()`; the HTTP API sends the same bytes.
public struct JSONValueEncoder: Sendable {
    /// An encoder.
    public init() {}

    /// `value` as JSON. Throws `EncodingError.invalidValue` for floating-point
    /// numbers, which no result holds (amounts and times are whole numbers).
    package func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        let slot = Slot()
        try slot.encode(value, at: [])
        return slot.resolved()
    }
}

/// Where one value goes while it is encoded: nothing yet, a finished value,
/// or a container still being filled.
private final class Slot {
    enum Content {
        case empty
        case value(JSONValue)
        case object(ObjectStore)
        case array(ArrayStore)
    }
    var content = Content.empty

    func resolved() -> JSONValue {
        switch content {
        case .empty: .null
        case .value(let v): v
        case .object(let o): .object(o.keys.map { ($0, o.slots[$0]?.resolved() ?? .null) })
        case .array(let a): .array(a.slots.map { $0.resolved() })
        }
    }

    func encode<T: Encodable>(_ value: T, at path: [any CodingKey]) throws {
        if let json = value as? JSONValue {
            content = .value(json)
            return
        }
        try value.encode(to: ValueEncoder(slot: self, codingPath: path))
    }

    var object: ObjectStore {
        if case .object(let o) = content { return o }
        let o = ObjectStore()
        content = .object(o)
        return o
    }

    var array: ArrayStore {
        if case .array(let a) = content { return a }
        let a = ArrayStore()
        content = .array(a)
        return a
    }
}

private final class ObjectStore {
    var keys: [String] = []
    var slots: [String: Slot] = [:]

    func slot(_ key: String) -> Slot {
        if let s = slots[key] { return s }
        let s = Slot()
        keys.append(key)
        slots[key] = s
        return s
    }
}

private final class ArrayStore {
    var slots: [Slot] = []

    func append() -> Slot {
        let s = Slot()
        slots.append(s)
        return s
    }
}

private func floatRefused(_ path: [any CodingKey]) -> EncodingError {
    EncodingError.invalidValue(0.0, .init(codingPath: path, debugDescription: "results hold no floating-point numbers"))
}

private struct ValueEncoder: Encoder {
    let slot: Slot
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(KeyedContainer<Key>(store: slot.object, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer { UnkeyedContainer(store: slot.array, codingPath: codingPath) }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleContainer(slot: slot, codingPath: codingPath) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let store: ObjectStore
    let codingPath: [any CodingKey]

    private func put(_ value: JSONValue, _ key: Key) { store.slot(key.stringValue).content = .value(value) }

    mutating func encodeNil(forKey key: Key) throws { put(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { put(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { put(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { throw floatRefused(codingPath + [key]) }
    mutating func encode(_ value: Float, forKey key: Key) throws { throw floatRefused(codingPath + [key]) }
    mutating func encode(_ value: Int, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { put(.int(Int64(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { put(.int(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { put(.uint(UInt64(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { put(.uint(value), key) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try store.slot(key.stringValue).encode(value, at: codingPath + [key])
    }

    // An absent optional is written as null: a result's shape has every field.
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { put(value.map { .bool($0) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { put(value.map { .string($0) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { put(value.map { .int(Int64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { put(value.map { .int($0) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { put(value.map { .uint($0) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { put(value.map { .int(Int64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { put(value.map { .int(Int64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { put(value.map { .int(Int64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { put(value.map { .uint(UInt64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { put(value.map { .uint(UInt64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { put(value.map { .uint(UInt64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { put(value.map { .uint(UInt64($0)) } ?? .null, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws {
        if value != nil { throw floatRefused(codingPath + [key]) }
        put(.null, key)
    }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws {
        if value != nil { throw floatRefused(codingPath + [key]) }
        put(.null, key)
    }
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { put(.null, key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(KeyedContainer<NestedKey>(store: store.slot(key.stringValue).object, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        UnkeyedContainer(store: store.slot(key.stringValue).array, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { ValueEncoder(slot: store.slot("super"), codingPath: codingPath) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { ValueEncoder(slot: store.slot(key.stringValue), codingPath: codingPath + [key]) }
}

private struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { intValue.map(String.init) ?? "" }
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let store: ArrayStore
    let codingPath: [any CodingKey]
    var count: Int { store.slots.count }

    private func put(_ value: JSONValue) { store.append().content = .value(value) }
    private var path: [any CodingKey] { codingPath + [IndexKey(count)] }

    mutating func encodeNil() throws { put(.null) }
    mutating func encode(_ value: Bool) throws { put(.bool(value)) }
    mutating func encode(_ value: String) throws { put(.string(value)) }
    mutating func encode(_ value: Double) throws { throw floatRefused(path) }
    mutating func encode(_ value: Float) throws { throw floatRefused(path) }
    mutating func encode(_ value: Int) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { put(.int(value)) }
    mutating func encode(_ value: UInt) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt8) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt16) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt32) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt64) throws { put(.uint(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        let p = path
        try store.append().encode(value, at: p)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let p = path
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(store: store.append().object, codingPath: p))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let p = path
        return UnkeyedContainer(store: store.append().array, codingPath: p)
    }

    mutating func superEncoder() -> any Encoder {
        let p = path
        return ValueEncoder(slot: store.append(), codingPath: p)
    }
}

private struct SingleContainer: SingleValueEncodingContainer {
    let slot: Slot
    let codingPath: [any CodingKey]

    private func put(_ value: JSONValue) { slot.content = .value(value) }

    mutating func encodeNil() throws { put(.null) }
    mutating func encode(_ value: Bool) throws { put(.bool(value)) }
    mutating func encode(_ value: String) throws { put(.string(value)) }
    mutating func encode(_ value: Double) throws { throw floatRefused(codingPath) }
    mutating func encode(_ value: Float) throws { throw floatRefused(codingPath) }
    mutating func encode(_ value: Int) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int8) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int16) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int32) throws { put(.int(Int64(value))) }
    mutating func encode(_ value: Int64) throws { put(.int(value)) }
    mutating func encode(_ value: UInt) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt8) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt16) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt32) throws { put(.uint(UInt64(value))) }
    mutating func encode(_ value: UInt64) throws { put(.uint(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { try slot.encode(value, at: codingPath) }
}
