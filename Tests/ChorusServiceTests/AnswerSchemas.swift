#if Service
import ChorusNode
import ChorusOperations
import ChorusService
import Foundation

/// A JSON text read back as a `JSONValue` (object keys in any order), to
/// check an answer against its schema. Strict: a number is never a boolean.
struct ParsedJSON: Decodable {
    let value: JSONValue

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            value = .null
        } else if let b = try? c.decode(Bool.self) {
            value = .bool(b)
        } else if let n = try? c.decode(Int64.self) {
            value = .int(n)
        } else if let n = try? c.decode(UInt64.self) {
            value = .uint(n)
        } else if let s = try? c.decode(String.self) {
            value = .string(s)
        } else if let a = try? c.decode([ParsedJSON].self) {
            value = .array(a.map(\.value))
        } else {
            value = .object(try c.decode([String: ParsedJSON].self).map { ($0.key, $0.value.value) })
        }
    }

    static func parse(_ bytes: [UInt8]) throws -> JSONValue { try JSONDecoder().decode(ParsedJSON.self, from: Data(bytes)).value }
}

/// Specs/api.openapi.json says what each endpoint answers: these check a
/// real answer against it.
enum AnswerSchemas {
    /// Where an answer of `method path` does not match the document: a 200
    /// with JSON against the route's answer schema, any other status with a
    /// JSON body against `{"code", "message", …}`.
    static func problems(_ method: CommandRoute.Method, _ path: String, status: Int, body: [UInt8]) -> [String] {
        let bare = String(path.prefix { $0 != "?" })
        guard let (route, _) = CommandRoute.match(method, bare) else { return ["\(method.rawValue) \(bare) is no route"] }
        if status == 304 { return [] }
        if status == 200 {
            guard let schema = route.answerSchema else { return [] }
            guard let value = try? ParsedJSON.parse(body) else { return ["\(method.rawValue) \(bare): the answer is not JSON"] }
            return schema.problems(in: value)
        }
        guard let value = try? ParsedJSON.parse(body), case .object(let fields) = value else {
            return ["\(method.rawValue) \(bare) \(status): the error body is not a JSON object"]
        }
        let given = Dictionary(fields, uniquingKeysWith: { first, _ in first })
        guard case .string = given["code"], case .string = given["message"] else {
            return ["\(method.rawValue) \(bare) \(status): the error body lacks its code or message"]
        }
        return []
    }
}
#endif
