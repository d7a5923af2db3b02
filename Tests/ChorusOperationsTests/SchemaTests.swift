import ChorusNode
import ChorusOperations
import Testing

/// The answer schemas (Specs/api.md §5) catch what they should.
@Suite("answer schemas")
struct SchemaTests {
    @Test("a schema refuses a missing or unknown field, a wrong type, a non-hex id and a value no branch of anyOf takes")
    func schemaChecks() {
        let schema = JSONSchema.object([("id", .hex32), ("size", .nullable(.integer)), ("tags", .array(.string))], optional: ["tags"])
        let id = String(repeating: "ab", count: 32)
        #expect(schema.problems(in: .object([("id", .string(id)), ("size", .null)])).isEmpty)
        #expect(schema.problems(in: .object([("id", .string(id)), ("size", .uint(3)), ("tags", .array([.string("a")]))])).isEmpty)
        #expect(schema.problems(in: .object([("size", .null)])) == [#"$: the field "id" is missing"#])
        #expect(schema.problems(in: .object([("id", .string(id)), ("size", .null), ("extra", .bool(true))])) == [#"$: the field "extra" is not in the schema"#])
        #expect(schema.problems(in: .object([("id", .string(id.uppercased())), ("size", .null)])).count == 1)
        #expect(schema.problems(in: .object([("id", .string(id)), ("size", .string("3"))])).count == 1)
        #expect(schema.problems(in: .object([("id", .string(id)), ("size", .null), ("tags", .array([.int(1)]))])) != [])
        #expect(schema.problems(in: .array([])) != [])
        let status = JSONSchema.anyOf([.object([("status", .constant("live"))]), .object([("status", .constant("unknown")), ("id", .hex32)])])
        #expect(status.problems(in: .object([("status", .string("unknown")), ("id", .string(id))])).isEmpty)
        #expect(status.problems(in: .object([("status", .string("gone"))])).count == 1)
    }

    @Test("every shared shape a schema names exists, and each renders as JSON Schema")
    func sharedShapes() {
        for (name, schema) in JSONSchema.components {
            #expect(!schema.json.rendered().isEmpty, "\(name)")
        }
        #expect(JSONSchema.ref("Picture").problems(in: .null) != [])
        #expect(JSONSchema.ref("Nothing").problems(in: .null) == ["$: no shared schema Nothing"])
        #expect(MutationReport<NoFields>.schema.problems(in: .object([("event", .string(String(repeating: "0", count: 64))), ("effective", .bool(true))])).isEmpty)
    }
}
