import ChorusNode
import ChorusReplay

/// The coin audit as `chorus-replay audit coins` and `chorus query audit` print it.
public func printCoinAudit(_ audit: CoinAudit, json: Bool) {
    if json {
        printJSON(.object([
            ("issued", .uint(audit.issued)), ("held", .uint(audit.held)), ("spent", .uint(audit.spent)),
            ("conserved", .bool(audit.conserved)),
            ("users", .array(audit.users.map { u in
                .object([
                    ("user", .string(u.user.hex)), ("credits", .uint(u.credits)), ("gifts_received", .uint(u.giftsReceived)),
                    ("gifts_given", .uint(u.giftsGiven)), ("spent", .uint(u.spent)), ("balance", .uint(u.balance)),
                    ("devices", .object(u.devices.sorted { $0.key < $1.key }.map { ($0.key.hex, .uint($0.value)) })),
                ])
            })),
            ("steps", .array(audit.steps.map { st in
                .object([
                    ("event", .string(st.event.hex)), ("hlc", .uint(st.hlc.rawValue)), ("kind", .string(st.kind.name)),
                    ("author", .string(st.author.hex)), ("amount", .uint(st.amount)),
                    ("from", st.from.map { .string($0.hex) } ?? .null), ("to", st.to.map { .string($0.hex) } ?? .null),
                    ("receipt", st.receipt.map { .string($0) } ?? .null),
                    ("decision", .string(st.noEffect?.code ?? "applied")),
                    ("from_rights_after", st.fromRightsAfter.map { .uint($0) } ?? .null),
                    ("to_rights_after", st.toRightsAfter.map { .uint($0) } ?? .null),
                ])
            })),
            ("receipts", .array(audit.receipts.map { r in
                .object([
                    ("receipt", .string(r.receipt)), ("credit", .string(r.credit.hex)), ("amount", .uint(r.amount)),
                    ("destinations", .object(r.destinations.sorted { $0.key < $1.key }.map { ($0.key, .uint($0.value)) })),
                ])
            })),
            ("findings", .array(audit.findings.map(findingJSON))),
        ]))
    } else {
        emit("ledger, in merge order:")
        for st in audit.steps {
            var line = "  \(st.hlc)  \(st.kind.name.padding(toLength: 18, withPad: " ", startingAt: 0)) \(st.amount)"
            if let r = st.receipt { line += " receipt \(r)" }
            if let f = st.from { line += " from \(f.short)\(st.fromRightsAfter.map { " (now \($0))" } ?? "")" }
            if let t = st.to { line += " to \(t.short)\(st.toRightsAfter.map { " (now \($0))" } ?? "")" }
            line += st.noEffect.map { "  NO EFFECT \($0.code): \($0.detail)" } ?? ""
            emit(line)
        }
        emit("users:")
        for u in audit.users {
            emit("  \(u.user.short): balance \(u.balance) = credits \(u.credits) + gifts received \(u.giftsReceived) − spent \(u.spent) − gifts given \(u.giftsGiven)")
            for (d, r) in u.devices.sorted(by: { $0.key < $1.key }) { emit("      device \(d.short) holds \(r)") }
        }
        emit("receipts:")
        for r in audit.receipts {
            let where_ = r.destinations.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            emit("  \(r.receipt): \(r.amount) coins (credit \(r.credit.short)) -> \(where_.isEmpty ? "-" : where_)")
        }
        emit("conservation: issued \(audit.issued) = held \(audit.held) + spent \(audit.spent)\(audit.conserved ? "" : "  VIOLATED")")
        printFindings(audit.findings)
    }
}

public func findingJSON(_ f: Finding) -> JSONValue {
    .object([
        ("code", .string(f.code)), ("message", .string(f.message)), ("event", f.event.map { .string($0.hex) } ?? .null),
        ("location", .string(f.location)),
    ])
}

public func printFindings(_ findings: [Finding]) {
    if findings.isEmpty {
        emit("no findings")
    } else {
        emit("\(findings.count) finding\(findings.count == 1 ? "" : "s"):")
        for f in findings {
            emit("  [\(f.code)] \(f.location): \(f.message)\(f.event.map { " (event \($0.hex))" } ?? "")")
        }
    }
}
