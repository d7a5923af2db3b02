import ChorusNode

/// The JSON Schema of an answer (Specs/api.md §5): the subset of JSON
/// Schema 2020-12 that `Specs/api.openapi.json` uses. Every operation's
/// result states its schema next to its `encode(to:)`, so the document is
/// made from the types, and `problems(in:)` checks real answers against it.
public indirect enum JSONSchema: Sendable {
    /// Any text.
    case string
    /// 64 lowercase hex digits: a key, an id or a hash.
    case hex32
    /// A whole number.
    case integer
    /// true or false.
    case boolean
    /// Exactly this text.
    case constant(String)
    /// One of these texts.
    case oneOfTexts([String])
    /// A list of values of one schema.
    case array(JSONSchema)
    /// An object with these fields (no others); a field is required unless named in `optional`.
    case object([(String, JSONSchema)], optional: Set<String> = [])
    /// An object whose keys are free and whose values have one schema.
    case map(JSONSchema)
    /// The value, or null.
    case nullable(JSONSchema)
    /// Any of these schemas.
    case anyOf([JSONSchema])
    /// A shared shape, by its name among `JSONSchema.components`.
    case ref(String)
    /// Any JSON value (a profile field's value, an event payload).
    case anyValue

    /// The shared shapes (`#/components/schemas/NAME` in the document).
    public static let components: [String: JSONSchema] = [
        "Picture": PictureShape.schema, "Reference": ReferenceShape.schema, "Device": DeviceShape.schema,
        "Chat": ChatShape.schema, "Message": MessageShape.schema, "InboxRow": InboxRowShape.schema, "Relay": RelayShape.schema, "Event": ListLog.eventSchema,
    ]

    /// The schema as JSON Schema.
    package var json: JSONValue {
        switch self {
        case .string: return .object([("type", .string("string"))])
        case .hex32: return .object([("type", .string("string")), ("pattern", .string("^[0-9a-f]{64}$"))])
        case .integer: return .object([("type", .string("integer"))])
        case .boolean: return .object([("type", .string("boolean"))])
        case .constant(let text): return .object([("const", .string(text))])
        case .oneOfTexts(let texts): return .object([("enum", .array(texts.map { .string($0) }))])
        case .array(let items): return .object([("type", .string("array")), ("items", items.json)])
        case .object(let fields, let optional):
            return .object([
                ("type", .string("object")), ("properties", .object(fields.map { ($0.0, $0.1.json) })),
                ("required", .array(fields.map(\.0).filter { !optional.contains($0) }.map { .string($0) })),
                ("additionalProperties", .bool(false)),
            ])
        case .map(let values): return .object([("type", .string("object")), ("additionalProperties", values.json)])
        case .nullable(let schema): return .object([("anyOf", .array([schema.json, .object([("type", .string("null"))])]))])
        case .anyOf(let schemas): return .object([("anyOf", .array(schemas.map(\.json)))])
        case .ref(let name): return .object([("$ref", .string("#/components/schemas/\(name)"))])
        case .anyValue: return .object([])
        }
    }

    /// Where `value` does not match this schema, one line each ("$.picture.size: expected an integer"); empty when it matches.
    package func problems(in value: JSONValue, at path: String = "$") -> [String] {
        func expected(_ what: String) -> [String] { ["\(path): expected \(what), got \(value.rendered().prefix(80))"] }
        switch (self, value) {
        case (.anyValue, _): return []
        case (.string, .string): return []
        case (.hex32, .string(let s)):
            return s.utf8.count == 64 && s.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) ? [] : expected("64 lowercase hex digits")
        case (.integer, .int), (.integer, .uint): return []
        case (.boolean, .bool): return []
        case (.constant(let c), .string(let s)): return s == c ? [] : expected("\"\(c)\"")
        case (.oneOfTexts(let texts), .string(let s)): return texts.contains(s) ? [] : expected("one of \(texts)")
        case (.array(let items), .array(let values)):
            return values.enumerated().flatMap { items.problems(in: $1, at: "\(path)[\($0)]") }
        case (.object(let fields, let optional), .object(let pairs)):
            var out: [String] = []
            let given = Dictionary(pairs, uniquingKeysWith: { first, _ in first })
            for (name, schema) in fields {
                if let v = given[name] {
                    out += schema.problems(in: v, at: "\(path).\(name)")
                } else if !optional.contains(name) {
                    out.append("\(path): the field \"\(name)\" is missing")
                }
            }
            let known = Set(fields.map(\.0))
            out += pairs.map(\.0).filter { !known.contains($0) }.map { "\(path): the field \"\($0)\" is not in the schema" }
            return out
        case (.map(let values), .object(let pairs)):
            return pairs.flatMap { values.problems(in: $1, at: "\(path).\($0)") }
        case (.nullable, .null): return []
        case (.nullable(let schema), _): return schema.problems(in: value, at: path)
        case (.anyOf(let schemas), _):
            let each = schemas.map { $0.problems(in: value, at: path) }
            return each.contains { $0.isEmpty } ? [] : ["\(path): matches none of \(schemas.count) schemas: \(each.map { $0.first ?? "" })"]
        case (.ref(let name), _):
            guard let schema = Self.components[name] else { return ["\(path): no shared schema \(name)"] }
            return schema.problems(in: value, at: path)
        case (.string, _), (.hex32, _): return expected("a string")
        case (.integer, _): return expected("an integer")
        case (.boolean, _): return expected("true or false")
        case (.constant, _), (.oneOfTexts, _): return expected("a string")
        case (.array, _): return expected("an array")
        case (.object, _), (.map, _): return expected("an object")
        }
    }
}

/// A type whose JSON encoding has a stated schema.
public protocol SchemaDescribed {
    /// The schema of the type's JSON.
    static var schema: JSONSchema { get }
}

/// The fields a mutation report starts with (`MutationReport`).
public protocol ReportFields: Encodable, Sendable {
    /// The fields, in order, and which of them may be left out.
    static var fields: [(String, JSONSchema)] { get }
    /// Fields that are not always there.
    static var optionalFields: Set<String> { get }
}

extension ReportFields {
    /// Every field is always there.
    public static var optionalFields: Set<String> { [] }
}
