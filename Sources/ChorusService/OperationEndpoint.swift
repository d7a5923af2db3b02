#if Service
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import Foundation
import Hummingbird

/// A JSON value of a request body, as sent: a whole number stays the text
/// it was written as (so any size of amount passes through to the check
/// that judges it), a fraction is kept apart (no field takes one).
enum JSONInput: Decodable, Sendable, Equatable {
    case string(String)
    case integer(String)
    case fraction
    case bool(Bool)
    case null
    case array([JSONInput])
    case object([String: JSONInput])

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let n = try? c.decode(Int64.self) {
            self = .integer(String(n))
        } else if let n = try? c.decode(UInt64.self) {
            self = .integer(String(n))
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONInput].self) {
            self = .array(a)
        } else if let o = try? c.decode([String: JSONInput].self) {
            self = .object(o)
        } else {
            _ = try c.decode(Double.self)
            self = .fraction
        }
    }

    /// A request body: a JSON object, or empty (no fields).
    static func body(_ data: Data) throws(CommandRoute.InputError) -> [String: JSONInput] {
        if data.isEmpty { return [:] }
        guard let value = try? JSONDecoder().decode(JSONInput.self, from: data) else { throw .badBody("not JSON") }
        guard case .object(let fields) = value else { throw .badBody("not a JSON object") }
        return fields
    }
}

/// What a typed endpoint reads from its request (Specs/api.md §5): path
/// parameters, query parameters and the JSON body's fields, each checked
/// for its type; failures are `OperationError`s of kind `badInput`.
struct OperationRequest: Sendable {
    let parameters: [String: String]
    let query: [String: String]
    let body: [String: JSONInput]
    /// The raw body of an upload endpoint (an image).
    var upload: [UInt8] = []

    /// The query parameter `name` as an id, nil when absent.
    func queryID(_ name: String) throws -> Bytes32? {
        guard let text = query[name] else { return nil }
        guard let id = Bytes32(hex: text.lowercased()) else { throw OperationError.badID(text, what: name) }
        return id
    }

    /// The query parameter `name` as a flag: true for `true` or `1`, false when absent or `false`/`0`.
    func queryFlag(_ name: String) throws -> Bool {
        switch query[name]?.lowercased() {
        case nil, "false", "0": return false
        case "true", "1", "": return true
        case let other?: throw OperationError(.badInput, code: "bad_\(name)", "\(name) is true or false, not \"\(other.prefix(40))\"")
        }
    }

    /// The query parameter `name` as a whole number, nil when absent.
    func queryInt(_ name: String) throws -> Int? {
        guard let text = query[name] else { return nil }
        guard let n = Int(text) else { throw OperationError(.badInput, code: "bad_\(name)", "\(name) must be a whole number, got \"\(text.prefix(40))\"") }
        return n
    }

    /// The path parameter `name` as an id (64 hex digits, either case).
    func pathID(_ name: String, what: String) throws -> Bytes32 {
        let text = parameters[name] ?? ""
        guard let id = Bytes32(hex: text.lowercased()) else { throw OperationError.badID(text, what: what) }
        return id
    }

    /// The body field `name` as text, nil when absent.
    func text(_ name: String) throws -> String? {
        switch body[name] {
        case nil: return nil
        case .string(let s): return s
        default: throw OperationError(.badInput, code: "bad_field", "the field \"\(name)\" must be a string")
        }
    }

    /// The required body field `name` as text.
    func requiredText(_ name: String) throws -> String {
        guard let text = try text(name) else { throw CommandRoute.InputError.missingField(name).failure }
        return text
    }

    /// The body field `name` as an id, nil when absent.
    func id(_ name: String) throws -> Bytes32? {
        guard let text = try text(name) else { return nil }
        guard let id = Bytes32(hex: text.lowercased()) else { throw OperationError.badID(text, what: "\"\(name)\"") }
        return id
    }

    /// The body field `name` as a list of texts (a JSON array of strings), empty when absent.
    func texts(_ name: String) throws -> [String] {
        switch body[name] {
        case nil: return []
        case .array(let items):
            return try items.map { item in
                guard case .string(let text) = item else { throw OperationError(.badInput, code: "bad_field", "the field \"\(name)\" must be a list of strings") }
                return text
            }
        default: throw OperationError(.badInput, code: "bad_field", "the field \"\(name)\" must be a list of strings")
        }
    }

    /// The body field `name` as a list of ids (a JSON array of strings), empty when absent.
    func ids(_ name: String) throws -> [Bytes32] {
        switch body[name] {
        case nil: return []
        case .array(let items):
            return try items.map { item in
                guard case .string(let text) = item else {
                    throw OperationError(.badInput, code: "bad_field", "the field \"\(name)\" must be a list of ids")
                }
                guard let id = Bytes32(hex: text.lowercased()) else { throw OperationError.badID(text, what: "an id of \"\(name)\"") }
                return id
            }
        default: throw OperationError(.badInput, code: "bad_field", "the field \"\(name)\" must be a list of ids")
        }
    }

    /// The body field `name` as a boolean, false when absent.
    func flag(_ name: String) throws -> Bool {
        switch body[name] {
        case nil: return false
        case .bool(let b): return b
        default: throw OperationError(.badInput, code: "bad_field", "the field \"\(name)\" must be true or false")
        }
    }

    /// The body field `name` as a number of coins: a whole number above 0, as a JSON number or a string.
    func amount(_ name: String) throws -> UInt64 {
        let text: String
        switch body[name] {
        case nil: throw CommandRoute.InputError.missingField(name).failure
        case .integer(let n): text = n
        case .string(let s): text = s
        default: throw OperationError(.badInput, code: "bad_amount", "the field \"\(name)\" must be a whole number of coins above 0")
        }
        guard let n = UInt64(text), n > 0 else {
            throw OperationError(.badInput, code: "bad_amount", "the field \"\(name)\" must be a whole number of coins above 0, got \(text.prefix(40))")
        }
        return n
    }

    /// The body field `name` as a whole number of 0 or more, as a JSON number or a string; nil when absent.
    func count(_ name: String) throws -> Int? {
        let text: String
        switch body[name] {
        case nil: return nil
        case .integer(let n): text = n
        case .string(let s): text = s
        default: throw OperationError(.badInput, code: "bad_\(name)", "the field \"\(name)\" must be a whole number of 0 or more")
        }
        guard let n = Int(text), n >= 0 else {
            throw OperationError(.badInput, code: "bad_\(name)", "the field \"\(name)\" must be a whole number of 0 or more, got \(text.prefix(40))")
        }
        return n
    }

    /// The path parameter `name` as a slot number.
    func slot(_ name: String) throws -> Int {
        let text = parameters[name] ?? ""
        guard let n = Int(text) else { throw OperationError(.badInput, code: "bad_slot", "a slot is a whole number, got \"\(text.prefix(40))\"") }
        return n
    }

    /// A gallery placement from exactly one of the fields `before`, `after` (ids), `first`, `last` (true).
    func placement() throws -> GalleryPlacement {
        var given: [GalleryPlacement] = []
        if let id = try id("before") { given.append(.before(PictureID(id))) }
        if let id = try id("after") { given.append(.after(PictureID(id))) }
        if try flag("first") { given.append(.first) }
        if try flag("last") { given.append(.last) }
        guard given.count == 1, let placement = given.first else {
            throw OperationError(.badInput, code: "bad_placement", "give exactly one of before (a picture id), after (a picture id), first: true, last: true")
        }
        return placement
    }

    /// The required body field `name` as an id.
    func requiredID(_ name: String) throws -> Bytes32 {
        guard let id = try id(name) else { throw CommandRoute.InputError.missingField(name).failure }
        return id
    }
}

/// How a typed endpoint answers: it makes its operation from the request,
/// runs it on the node and answers its result (200), the result with its
/// failure's status (a mutation stored without effect: 422), or the
/// failure as `{"code", "message"}` with the status of its kind.
struct OperationEndpoint: Sendable {
    let answer: @Sendable (Node, OperationRequest) async -> (status: Int, body: JSONValue, nextPage: String?)
    /// The schema of a 200 answer: the operation's result's.
    let resultSchema: JSONSchema

    init<Op: NodeOperation>(_ make: @escaping @Sendable (OperationRequest) throws -> Op) {
        resultSchema = Op.Result.schema
        answer = { node, request in
            let result: Op.Result
            do {
                result = try await make(request).run(on: node)
            } catch {
                let failure = OperationError(error)
                return (failure.httpStatus, Self.errorBody(failure), nil)
            }
            do {
                let body = try JSONValueEncoder().encode(result)
                guard let failure = result.failure else { return (200, body, result.nextPage) }
                // An error that carries data: the code and message first, the result's own fields after.
                guard case .object(let fields) = body else { return (failure.httpStatus, Self.errorBody(failure), nil) }
                let own = fields.filter { $0.0 != "code" && $0.0 != "message" }
                return (failure.httpStatus, .object([("code", .string(failure.code)), ("message", .string(failure.message))] + own), nil)
            } catch {
                return (500, Self.errorBody(OperationError(.failed, code: "internal", "the answer could not be encoded: \(error)")), nil)
            }
        }
    }

    /// `{"code": …, "message": …}` (Specs/api.md §5).
    static func errorBody(_ failure: OperationError) -> JSONValue {
        .object([("code", .string(failure.code)), ("message", .string(failure.message))])
    }
}

/// How a typed endpoint that answers bytes (an image, an export) answers
/// (Specs/api.md §5): its body with its media type, streamed; a failure
/// before the first byte as `{"code", "message"}` with its status.
struct BytesEndpoint: Sendable {
    let answer: @Sendable (Node, OperationRequest) async -> Response

    init(_ answer: @escaping @Sendable (Node, OperationRequest) async throws -> Response) {
        self.answer = { node, request in
            do { return try await answer(node, request) } catch {
                let failure = OperationError(error)
                return APIServer.errorResponse(.init(code: failure.httpStatus), code: failure.code, failure.message)
            }
        }
    }

    /// `GET /v1/pictures/{id}/bytes`: the image, with its media type.
    static let pictureBytes = BytesEndpoint { node, r in
        let (data, mediaType) = try await GetPictureBytes(PictureID(try r.pathID("id", what: "ID"))).run(on: node)
        return Response(status: .ok, headers: [.contentType: mediaType], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// `GET /v1/export`: every event, page by page; the format is checked before the first byte.
    static let export = BytesEndpoint { node, r in
        let format: EventFileFormat
        switch r.query["format"] ?? "cbor" {
        case "cbor": format = .cbor
        case "jsonl": format = .jsonl
        case let other: throw OperationError(.badInput, code: "bad_format", "format is cbor or jsonl, not \"\(other.prefix(40))\"")
        }
        let export = ExportEvents(format: format)
        return Response(
            status: .ok, headers: [.contentType: "application/octet-stream"],
            body: ResponseBody { writer in
                try await export.run(on: node) { try await writer.write(ByteBuffer(bytes: $0)) }
                try await writer.finish(nil)
            })
    }
}
#endif
