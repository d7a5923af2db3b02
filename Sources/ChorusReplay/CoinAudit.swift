import ChorusCrypto
import ChorusEvents
import ChorusProjections

/// One coin event replayed by the audit.
public struct AuditStep: Hashable, Sendable {
    public let event: EventID
    public let hlc: HLC
    public let author: PublicKey
    package let kind: EventKind
    public let amount: UInt64
    public let from: PublicKey?
    public let to: PublicKey?
    public let receipt: String?
    public let noEffect: NoEffect?
    /// Rights of `from` and `to` after this step.
    public let fromRightsAfter: UInt64?
    public let toRightsAfter: UInt64?
}

/// Where the coins of one purchase receipt are now (first in, first out).
public struct ReceiptTrace: Hashable, Sendable {
    public let receipt: String
    public let credit: EventID
    public let amount: UInt64
    /// (where, how many): "held by device X", "spent: sticker pack (event)", "slot 2 of user X".
    public let destinations: [String: UInt64]
}

public struct UserCoins: Hashable, Sendable {
    public let user: PublicKey
    public var credits: UInt64 = 0
    public var giftsReceived: UInt64 = 0
    public var giftsGiven: UInt64 = 0
    public var spent: UInt64 = 0
    public var balance: UInt64 = 0
    public var devices: [PublicKey: UInt64] = [:]
}

public struct CoinAudit: Sendable {
    public var steps: [AuditStep] = []
    public var users: [UserCoins] = []
    public var receipts: [ReceiptTrace] = []
    public var issued: UInt64 = 0
    public var held: UInt64 = 0
    public var spent: UInt64 = 0
    public var findings: [Finding] = []

    public var conserved: Bool { issued == held + spent }
}

extension ReplayStore {
    /// Replays the coin ledger from its recorded decisions, checking the
    /// escrow counter's invariants at every step independently of the
    /// engine: effective credits come from issuers and count each receipt
    /// once, no rights go below zero, a `beyond_rights` decision really was
    /// beyond the rights, the coins issued stay within the supply's limit
    /// and a `supply_exhausted` decision really was past it, the final
    /// rights and the coins credited equal the projected ones, and every
    /// coin issued is held or spent.
    public func auditCoins(user filter: PublicKey? = nil) throws -> CoinAudit {
        var audit = CoinAudit()
        let issuers = Set(projections.config.issuers)
        var rights: [PublicKey: UInt64] = [:]
        var lots: [PublicKey: [(receipt: Int, amount: UInt64)]] = [:]
        var traces: [(receipt: String, credit: EventID, amount: UInt64, destinations: [String: UInt64])] = []
        var counted: [String: EventID] = [:]
        var perUser: [PublicKey: UserCoins] = [:]
        var userOf: [PublicKey: PublicKey] = [:]
        func owner(_ key: PublicKey) throws -> PublicKey {
            if let u = userOf[key] { return u }
            let u = try projections.binding(of: key)?.user ?? key
            userOf[key] = u
            return u
        }
        func finding(_ code: String, _ message: String, _ id: EventID) {
            audit.findings.append(Finding(code: code, message: message, event: id, location: "ledger[\(id.hex)]"))
        }
        /// Moves `amount` of `from`'s lots to `destination` (FIFO).
        func consume(_ from: PublicKey, _ amount: UInt64, into destination: (Int, UInt64) -> Void) {
            var left = amount
            var queue = lots[from] ?? []
            while left > 0, !queue.isEmpty {
                let take = min(left, queue[0].amount)
                destination(queue[0].receipt, take)
                queue[0].amount -= take
                if queue[0].amount == 0 { queue.removeFirst() }
                left -= take
            }
            lots[from] = queue
        }

        for (order, entry) in try projections.ledger() {
            let id = order.id
            var fromAfter: UInt64? = nil
            var toAfter: UInt64? = nil
            let limit = UInt64(projections.supplyLimit)
            let roomLeft = limit - min(audit.issued, limit)
            if entry.isEffective, entry.kind == .coinCredited, entry.amount > roomLeft {
                // Counting it would pass what any sum of rights may hold; the
                // rest of the replay goes on without it.
                finding(
                    "supply_exceeded",
                    "an effective credit of \(entry.amount) after \(audit.issued) coins issued passes the limit of \(projections.supplyLimit)", id)
            } else if entry.isEffective {
                if entry.kind == .coinCredited {
                    if !issuers.contains(order.author) { finding("credit_by_non_issuer", "an effective credit signed by \(order.author.hex), not an issuer", id) }
                    if let receipt = entry.receipt {
                        if let earlier = counted[receipt] {
                            finding("receipt_counted_twice", "receipt \(receipt) counted by \(earlier.hex) and again by \(id.hex)", id)
                        }
                        counted[receipt] = id
                    }
                }
                if let from = entry.from {
                    let held = rights[from] ?? 0
                    if held < entry.amount {
                        finding("negative_rights", "\(from.hex) spends \(entry.amount) holding \(held)", id)
                        rights[from] = 0
                    } else {
                        rights[from] = held - entry.amount
                    }
                    fromAfter = rights[from]
                    let fromUser = try owner(from)
                    if entry.kind == .coinSpent || entry.kind == .slotUnlocked {
                        perUser[fromUser, default: UserCoins(user: fromUser)].spent += entry.amount
                        audit.spent += entry.amount
                        let label = entry.kind == .slotUnlocked ? "slot \(entry.slot?.slot ?? 0) of \(fromUser.short) (\(id.short))" : "spent (\(id.short))"
                        consume(from, entry.amount) { traces[$0].destinations[label, default: 0] += $1 }
                    } else if let to = entry.to {
                        let toUser = try owner(to)
                        if entry.kind == .coinGiven {
                            perUser[fromUser, default: UserCoins(user: fromUser)].giftsGiven += entry.amount
                            perUser[toUser, default: UserCoins(user: toUser)].giftsReceived += entry.amount
                        }
                        var moved: [(Int, UInt64)] = []
                        consume(from, entry.amount) { moved.append(($0, $1)) }
                        lots[to, default: []] += moved.map { (receipt: $0.0, amount: $0.1) }
                    }
                }
                if let to = entry.to {
                    rights[to] = (rights[to] ?? 0) + entry.amount
                    toAfter = rights[to]
                    if entry.kind == .coinCredited {
                        let toUser = try owner(to)
                        perUser[toUser, default: UserCoins(user: toUser)].credits += entry.amount
                        audit.issued += entry.amount
                        traces.append((entry.receipt ?? "?", id, entry.amount, [:]))
                        lots[to, default: []].append((receipt: traces.count - 1, amount: entry.amount))
                    }
                }
            } else if entry.noEffect?.code == "beyond_rights", let from = entry.from, (rights[from] ?? 0) >= entry.amount {
                finding("wrong_decision", "refused as beyond rights although \(from.hex) held \(rights[from] ?? 0)", id)
            } else if entry.noEffect?.code == "supply_exhausted", entry.amount <= roomLeft {
                finding("wrong_decision", "refused for the supply's limit although \(audit.issued) coins issued leave room for \(entry.amount)", id)
            }
            var involved = [order.author, entry.from, entry.to].compactMap { $0 }
            if filter != nil, let stored = try? log.event(id) {
                // A refused event names its parties only in the event itself.
                involved.append(stored.event.object)
                if stored.event.kind == .coinCredited, let payload = stored.event.payload,
                    let credit = try? CoinCreditedPayload(reading: payload)
                {
                    involved.append(credit.user)
                }
            }
            if try filter == nil || involved.contains(where: { try owner($0) == filter || $0 == filter }) {
                audit.steps.append(
                    AuditStep(
                        event: id, hlc: order.hlc, author: order.author, kind: entry.kind, amount: entry.amount, from: entry.from,
                        to: entry.to, receipt: entry.receipt, noEffect: entry.noEffect, fromRightsAfter: fromAfter, toRightsAfter: toAfter))
            }
        }

        // The projected rights must equal the replayed ones.
        let projected = Dictionary(uniqueKeysWithValues: try projections.allRights().map { ($0.key, $0.rights) })
        for key in Set(projected.keys).union(rights.keys.filter { rights[$0] != 0 }) where projected[key] ?? 0 != rights[key] ?? 0 {
            audit.findings.append(
                Finding(
                    code: "rights_mismatch", message: "projected rights of \(key.hex) are \(projected[key] ?? 0), the ledger gives \(rights[key] ?? 0)",
                    event: nil, location: "state[rights \(key.hex)]"))
        }
        let credited = try projections.coinsCredited()
        if credited != audit.issued {
            audit.findings.append(
                Finding(
                    code: "supply_mismatch", message: "the projections count \(credited) coins credited, the ledger issues \(audit.issued)",
                    event: nil, location: "index[supply]"))
        }
        for (key, amount) in rights where amount > 0 {
            let user = try owner(key)
            perUser[user, default: UserCoins(user: user)].devices[key] = amount
            perUser[user, default: UserCoins(user: user)].balance += amount
            audit.held += amount
            for lot in lots[key] ?? [] { traces[lot.receipt].destinations["held by \(key.short)", default: 0] += lot.amount }
        }
        for (user, coins) in perUser {
            let expected = Int64(coins.credits) + Int64(coins.giftsReceived) - Int64(coins.spent) - Int64(coins.giftsGiven)
            if expected != Int64(coins.balance) {
                audit.findings.append(
                    Finding(
                        code: "balance_mismatch",
                        message: "user \(user.hex): balance \(coins.balance) but credits + gifts received − spends − gifts given = \(expected)",
                        event: nil, location: "user \(user.hex)"))
            }
        }
        if !audit.conserved {
            audit.findings.append(
                Finding(code: "not_conserved", message: "issued \(audit.issued) ≠ held \(audit.held) + spent \(audit.spent)", event: nil, location: "ledger"))
        }
        audit.users = perUser.values.filter { filter == nil || $0.user == filter }.sorted { $0.user < $1.user }
        audit.receipts = traces.map { ReceiptTrace(receipt: $0.receipt, credit: $0.credit, amount: $0.amount, destinations: $0.destinations) }
        if filter != nil {
            let mine = Set(audit.steps.map(\.event))
            audit.receipts = audit.receipts.filter { mine.contains($0.credit) }
        }
        return audit
    }
}
