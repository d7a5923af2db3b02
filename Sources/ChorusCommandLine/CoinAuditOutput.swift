import ChorusNode
import ChorusOperations
import ChorusReplay

/// The coin audit as `chorus-replay audit coins` and `chorus query audit` print it.
public func printCoinAudit(_ audit: CoinAudit, json: Bool) {
    if json {
        printJSON(coinAuditJSON(audit))
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
