import ArgumentParser
import ChorusCommandLine
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusOperations
import ChorusProjections
import Foundation

// MARK: Running commands against a store

/// Opens the store, runs `body`, and closes the node whether or not `body` threw.
func withNode<T>(_ store: StoreOptions, readOnly: Bool = false, _ body: (Node) async throws -> T) async throws -> T {
    let node = try await store.open(readOnly: readOnly)
    do {
        let result = try await body(node)
        await release(node)
        return result
    } catch {
        await release(node)
        throw error
    }
}

/// What a mutation command reports: the event it signed, a sentence for
/// people and extra JSON fields (such as the id of a created object).
struct MutationResult {
    let event: EventID
    let summary: String
    var fields: [(String, JSONValue)] = []
}

/// Runs one mutation and reports it. An event that was stored but took no
/// effect (Specs/projections.md §4) is reported with its reason and exit status 1.
func mutate(
    _ store: StoreOptions, _ output: OutputOptions, _ body: (Node) async throws -> MutationResult
) async throws {
    let outcome = try await withNode(store) { node in try await mutationOutcome(node, body) }
    try report(outcome, json: output.json)
}

/// A mutation's result and, when it was stored but took no effect, why.
typealias MutationOutcome = (result: MutationResult, noEffect: NoEffect?)

func mutationOutcome(_ node: Node, _ body: (Node) async throws -> MutationResult) async throws -> MutationOutcome {
    let result = try await body(node)
    return (result, try node.projections.noEffect(result.event))
}

/// Prints a mutation's outcome, as text or JSON; throws exit status 1 when it took no effect.
func report(_ outcome: MutationOutcome, json: Bool) throws {
    let (result, noEffect) = outcome
    if json {
        var fields = result.fields
        fields.append(("event", .string(result.event.hex)))
        fields.append(("effective", .bool(noEffect == nil)))
        if let noEffect {
            fields.append(("code", .string(noEffect.code)))
            fields.append(("reason", .string(noEffect.detail)))
        }
        printJSON(.object(fields))
    } else if let noEffect {
        emit("\(result.summary): stored as event \(result.event.short), but it took no effect: \(terminalSafe(noEffect.detail)) [\(noEffect.code)]")
    } else {
        emit("\(result.summary) (event \(result.event.short))")
    }
    if noEffect != nil { throw ExitCode(Exit.refused) }
}

/// Runs a mutation operation on the store and prints its report.
func perform<F>(_ operation: some NodeOperation<MutationReport<F>>, _ store: StoreOptions, _ output: OutputOptions) async throws {
    let report = try await withNode(store) { node in try await operation.run(on: node) }
    try show(report, json: output.json)
}

/// Prints a mutation's report, as text or JSON (the operation's result as
/// it encodes); throws exit status 1 when it was stored without effect.
func show<F>(_ report: MutationReport<F>, json: Bool) throws {
    if json {
        printJSON(try JSONValueEncoder().encode(report))
    } else if let noEffect = report.noEffect {
        emit("\(report.summary): stored as event \(report.event.short), but it took no effect: \(terminalSafe(noEffect.detail)) [\(noEffect.code)]")
    } else {
        emit("\(report.summary) (event \(report.event.short))")
    }
    if report.noEffect != nil { throw ExitCode(Exit.refused) }
}

/// USER arguments default to this node's user.
func userOrSelf(_ text: String?, _ node: Node, what: String = "USER") throws -> UserID {
    guard let text else { return node.identity.user }
    return try parseID(text, what: what)
}

func parseAmount(_ text: String) throws -> UInt64 {
    guard let n = UInt64(text), n > 0 else { throw ValidationError("AMOUNT must be a whole number of coins above 0, got \"\(text)\"") }
    return n
}

// MARK: JSON and text forms of projections

func hlcJSON(_ hlc: HLC?) -> JSONValue { hlc.map { .uint($0.rawValue) } ?? .null }
func optionalString(_ s: String?) -> JSONValue { s.map { .string($0) } ?? .null }
func optionalUInt(_ n: UInt64?) -> JSONValue { n.map { .uint($0) } ?? .null }

/// A shape of `ChorusOperations` as JSON (shapes hold no floating-point number, so encoding cannot fail).
func shapeJSON<T: Encodable>(_ shape: T) -> JSONValue { (try? JSONValueEncoder().encode(shape)) ?? .null }

func pictureJSON(_ p: PictureView) -> JSONValue { shapeJSON(PictureShape(p)) }

/// `{"id", "status": "picture"|"removed"|"unresolved", "picture": {...}|null}`
func referenceJSON(_ ref: PictureReference?) -> JSONValue { ref.map { shapeJSON(ReferenceShape($0)) } ?? .null }

func referenceText(_ ref: PictureReference?) -> String {
    guard let ref else { return "-" }
    switch ref {
    case .picture(let p): return p.caption.map { "\(p.id.hex) \"\($0)\"" } ?? p.id.hex
    case .removed(let id): return "removed (was \(id.short))"
    case .unresolved(let id): return "unresolved (\(id.short), not received yet)"
    }
}

func deviceJSON(_ d: DeviceView) -> JSONValue { shapeJSON(DeviceShape(d)) }

func deviceRows(_ devices: [DeviceView]) -> String {
    table(
        devices.map { d in
            [d.device.hex, d.name ?? "-", d.addedHLC.description, d.removedHLC?.description ?? "-", String(d.rights)]
        }, header: ["DEVICE", "NAME", "ADDED", "REMOVED", "RIGHTS"])
}

/// A profile field's value for people: text as is, ids as hex.
func fieldText(_ value: CBORValue) -> String {
    switch value {
    case .text(let t): t
    case .null: "(cleared)"
    case .bytes(let b): Hex.encode(b)
    default: JSONValue(cbor: value).rendered()
    }
}

func keyList(_ keys: [PublicKey], json: Bool, empty: String) {
    if json {
        printJSON(.array(keys.map { .string($0.hex) }))
    } else if keys.isEmpty {
        emit(empty)
    } else {
        for k in keys { emit(k.hex) }
    }
}

