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

// MARK: Text forms of projections

func referenceText(_ ref: PictureReference?) -> String {
    guard let ref else { return "-" }
    switch ref {
    case .picture(let p): return p.caption.map { "\(p.id.hex) \"\($0)\"" } ?? p.id.hex
    case .removed(let id): return "removed (was \(id.short))"
    case .unresolved(let id): return "unresolved (\(id.short), not received yet)"
    }
}

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

