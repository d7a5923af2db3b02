import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog

/// A JSON value with deterministic rendering (object keys keep their given
/// order), used for `--json` output and JSON-lines export.
package indirect enum JSONValue: Sendable, Equatable {
    case string(String)
    case int(Int64)
    case uint(UInt64)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([(String, JSONValue)])

    /// Two values are equal when they render to the same text, so object key
    /// order matters and `.int(5) == .uint(5)`.
    package static func == (a: JSONValue, b: JSONValue) -> Bool { a.rendered() == b.rendered() }

    /// Renders compact JSON with no whitespace, object keys in their given order,
    /// non-ASCII text as UTF-8 and control characters escaped.
    package func rendered() -> String {
        var out = ""
        render(into: &out)
        return out
    }

    private func render(into out: inout String) {
        switch self {
        case .string(let s): JSONValue.quote(s, into: &out)
        case .int(let n): out += String(n)
        case .uint(let n): out += String(n)
        case .bool(let b): out += b ? "true" : "false"
        case .null: out += "null"
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.render(into: &out)
            }
            out += "]"
        case .object(let fields):
            out += "{"
            for (i, (key, value)) in fields.enumerated() {
                if i > 0 { out += "," }
                JSONValue.quote(key, into: &out)
                out += ":"
                value.render(into: &out)
            }
            out += "}"
        }
    }

    static func quote(_ s: String, into out: inout String) {
        out += "\""
        // Most strings (ids, hex, names) need no escape: appended whole, not
        // scalar by scalar (a large `--json` output spent most of its time here).
        // Bytes of multi-byte UTF-8 sequences are all ≥ 0x80.
        guard s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
            out += s
            out += "\""
            return
        }
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    /// CBOR to JSON: byte strings become lowercase hex, map keys text.
    package init(cbor: CBORValue) {
        switch cbor {
        case .unsigned(let n): self = .uint(n)
        case .negative(let n): self = n < UInt64(Int64.max) ? .int(-1 - Int64(n)) : .string("-1-\(n)")
        case .bytes(let b): self = .string(Hex.encode(b))
        case .text(let t): self = .string(t)
        case .array(let items): self = .array(items.map(JSONValue.init(cbor:)))
        case .map(let entries):
            self = .object(entries.map { e in
                let key: String =
                    switch e.key {
                    case .text(let t): t
                    case .unsigned(let n): String(n)
                    default: JSONValue(cbor: e.key).rendered()
                    }
                return (key, JSONValue(cbor: e.value))
            })
        case .bool(let b): self = .bool(b)
        case .null: self = .null
        }
    }
}

extension StoredEvent {
    /// The JSON form used by `chorus log --json` and JSON-lines export.
    /// `raw` adds the envelope as hex, which makes the line importable.
    package func json(includeRaw: Bool = false) -> JSONValue {
        let h = event.header
        var fields: [(String, JSONValue)] = [
            ("id", .string(event.id.hex)),
            ("author", .string(h.author.hex)),
            ("seq", .uint(h.seq)),
            ("prev", h.prev.map { .string($0.hex) } ?? .null),
            ("hlc", .uint(h.hlc.rawValue)),
            ("time", .string(h.hlc.description)),
            ("kind", .string(h.kind.name)),
            ("object", .string(h.object.hex)),
            ("payload", event.payload.map(JSONValue.init(cbor:)) ?? .null),
            ("payload_hash", .string(h.payloadHash.hex)),
            ("payload_length", .uint(h.payloadLength)),
            ("purged", .bool(event.payloadBytes == nil)),
            ("arrival", .uint(arrival)),
        ]
        if includeRaw { fields.append(("raw", .string(Hex.encode(event.encoded())))) }
        return .object(fields)
    }
}

/// A `JSONValue` encodes as the JSON it renders (object keys in order with
/// an encoder that keeps order), so a result may carry one as a field.
extension JSONValue: Encodable {
    /// Encodes the value as itself.
    package func encode(to encoder: any Encoder) throws {
        switch self {
        case .string(let s):
            var c = encoder.singleValueContainer()
            try c.encode(s)
        case .int(let n):
            var c = encoder.singleValueContainer()
            try c.encode(n)
        case .uint(let n):
            var c = encoder.singleValueContainer()
            try c.encode(n)
        case .bool(let b):
            var c = encoder.singleValueContainer()
            try c.encode(b)
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case .array(let items):
            var c = encoder.unkeyedContainer()
            for item in items { try c.encode(item) }
        case .object(let fields):
            var c = encoder.container(keyedBy: JSONKey.self)
            for (key, value) in fields { try c.encode(value, forKey: JSONKey(key)) }
        }
    }
}

/// Any string as a coding key (the keys of a `JSONValue` object).
package struct JSONKey: CodingKey, Sendable {
    /// The key.
    package let stringValue: String
    /// Keys here are names, never positions.
    package var intValue: Int? { nil }
    /// The key `name`.
    package init(_ name: String) { stringValue = name }
    /// The key `stringValue`.
    package init?(stringValue: String) { self.stringValue = stringValue }
    /// Not used: keys are names.
    package init?(intValue: Int) { nil }
}
