import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections

/// One operation of a node (Specs/api.md §5): a typed input (the
/// conforming type's properties), a typed `Encodable` result and the
/// `OperationError` codes it can end with. The command line and the HTTP API
/// run the same operations on the library's `Node`; neither calls the other
/// through text.
public protocol NodeOperation<Result>: Sendable {
    /// What the operation answers.
    associatedtype Result: OperationResult
    /// Runs the operation. Throws an `OperationError` or a library error
    /// (`OperationError.init(_:)` classes it).
    func run(on node: Node) async throws -> Result
}

/// What an operation answers: its JSON is the encoding of the value (with
/// `JSONValueEncoder`, fields in order, absent values as `null`).
public protocol OperationResult: Encodable, Sendable, SchemaDescribed {
    /// Set when the answer reports a failure although it carries data: a
    /// mutation stored without effect (HTTP 422 with the event; exit status 1).
    var failure: OperationError? { get }
    /// For a page of a list: the `after` that reads the next page (the last
    /// item's id), nil on the last page (HTTP: a `Link` header, rel next).
    var nextPage: String? { get }
}

extension OperationResult {
    /// No failure.
    public var failure: OperationError? { nil }
    /// Not paged.
    public var nextPage: String? { nil }
}

/// A page's size: `limit` when given (at least 0), else `defaultPageSize`.
func pageLimit(_ limit: Int?) throws -> Int {
    let limit = limit ?? defaultPageSize
    guard limit >= 0 else { throw OperationError(.badInput, code: "bad_limit", "limit must not be negative") }
    return limit
}

/// A page of at most `limit` items, read by `read` asked for one more (the
/// one more says whether another page follows), with the `after` of that
/// next page (`next` of the page's last item), nil on the last page.
func onePage<T>(limit: Int, read: (Int) throws -> [T], next: (T) -> String) rethrows -> (items: [T], next: String?) {
    let items = try read(limit + 1)
    let page = Array(items.prefix(limit))
    return (page, items.count > limit ? page.last.map(next) : nil)
}

/// The page a paged list answers when given `after` without `limit` (Specs/api.md §5).
public let defaultPageSize = 100

extension NodeOperation {
    /// Runs the operation and classes any error it throws.
    public func perform(on node: Node) async -> Swift.Result<Result, OperationError> {
        do { return .success(try await run(on: node)) } catch { return .failure(OperationError(error)) }
    }
}

/// What a mutation answers (Specs/api.md §5): the operation's own fields
/// (the target, a new object's id), then `event` (the signed event's id),
/// `effective`, and, when it was stored without effect (Specs/projections.md
/// §4), `code` and `reason`.
public struct MutationReport<Fields: ReportFields>: OperationResult {
    /// The fields that come first.
    public let fields: Fields
    /// The signed event.
    public let event: EventID
    /// Why the event took no effect, or nil.
    public let noEffect: NoEffect?
    /// A sentence for people saying what was done ("Followed 1a2b3c4d").
    public let summary: String

    /// A report of `event` with `fields`.
    public init(_ fields: Fields, event: EventID, noEffect: NoEffect?, summary: String) {
        self.fields = fields
        self.event = event
        self.noEffect = noEffect
        self.summary = summary
    }

    /// A report of `mutation` as committed, with its effect.
    public init<Object>(_ fields: Fields, _ mutation: Mutation<Object>, summary: String) {
        let noEffect: NoEffect? = if case .noEffect(let why) = mutation.effect { why } else { nil }
        self.init(fields, event: mutation.id, noEffect: noEffect, summary: summary)
    }

    /// The event was stored without effect.
    public var failure: OperationError? {
        noEffect.map { OperationError(.refused, code: $0.code, $0.detail) }
    }

    enum Keys: String, CodingKey { case event, effective, code, reason }

    /// The fields, then `event`, `effective`, and `code` and `reason` when without effect.
    public static var schema: JSONSchema {
        .object(
            Fields.fields + [("event", .hex32), ("effective", .boolean), ("code", .string), ("reason", .string)],
            optional: Fields.optionalFields.union(["code", "reason"]))
    }

    /// The fields, then `event`, `effective` and, without effect, `code` and `reason`.
    public func encode(to encoder: any Encoder) throws {
        try fields.encode(to: encoder)
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(event.hex, forKey: .event)
        try c.encode(noEffect == nil, forKey: .effective)
        if let noEffect {
            try c.encode(noEffect.code, forKey: .code)
            try c.encode(noEffect.detail, forKey: .reason)
        }
    }
}

/// A mutation report with no fields of its own.
public struct NoFields: ReportFields {
    /// None.
    public static var fields: [(String, JSONSchema)] { [] }
    /// Nothing.
    public init() {}
    /// Encodes nothing (an empty object when alone).
    public func encode(to encoder: any Encoder) throws { _ = encoder.container(keyedBy: JSONKey.self) }
}
