import ChorusNode
import Foundation
import Testing

@Suite("JSON output")
struct JSONTests {
    @Test func stringsAreEscapedExactlyWhereJSONRequiresIt() throws {
        let cases: [(String, String)] = [
            ("plain 0123abcdef", #""plain 0123abcdef""#),
            ("", #""""#),
            ("é 🎉 日本", "\"é 🎉 日本\""),
            ("say \"hi\"", #""say \"hi\"""#),
            ("back\\slash", #""back\\slash""#),
            ("line\nbreak\r\ttab", #""line\nbreak\r\ttab""#),
            ("bell\u{07} esc\u{1B} nul\u{00}", #""bell\u0007 esc\u001b nul\u0000""#),
            ("é\"\u{01}", #""é\"\u0001""#),
        ]
        for (text, expected) in cases {
            let rendered = JSONValue.string(text).rendered()
            #expect(rendered == expected)
            let parsed = try JSONSerialization.jsonObject(with: Data("[\(rendered)]".utf8)) as? [String]
            #expect(parsed == [text])
        }
        #expect(JSONValue.object([("k\"ey", .string("v"))]).rendered() == #"{"k\"ey":"v"}"#)
    }
}
