import ChorusCBOR
import ChorusCrypto
import ChorusEvents

/// The decision the ledger recorded for one coin event (Specs/projections.md §6.9).
public struct LedgerEntry: Hashable, Sendable {
    public let kind: EventKind
    public let amount: UInt64
    /// The device whose rights the event debits.
    public let from: PublicKey?
    /// The key whose rights the event credits.
    public let to: PublicKey?
    public let receipt: String?
    public let slot: (user: PublicKey, slot: UInt64)?
    public let noEffect: NoEffect?

    public var isEffective: Bool { noEffect == nil }

    public static func == (a: LedgerEntry, b: LedgerEntry) -> Bool { a.encoded() == b.encoded() }
    public func hash(into h: inout Hasher) { h.combine(encoded()) }

    func encoded() -> [UInt8] {
        Codec.cbor(
            .array([
                .unsigned(kind.code), .unsigned(amount), Codec.key32(from), Codec.key32(to),
                receipt.map { .text($0) } ?? .null,
                slot.map { .array([.bytes($0.user.bytes), .unsigned($0.slot)]) } ?? .null,
                noEffect.map { .array([.text($0.code), .text($0.detail)]) } ?? .null,
            ]))
    }

    static func decode(_ raw: [UInt8]) throws -> LedgerEntry {
        let v = try Codec.decode(raw, "ledger entry")
        guard let a = v.arrayValue, a.count == 7, let code = a[0].unsignedValue, let kind = EventKind(knownCode: code),
            let amount = a[1].unsignedValue
        else { throw ProjectionError.corrupt("ledger entry") }
        var slot: (PublicKey, UInt64)? = nil
        if let s = a[5].arrayValue, s.count == 2, let u = s[0].id32, let n = s[1].unsignedValue { slot = (u, n) }
        var noEffect: NoEffect? = nil
        if let n = a[6].arrayValue, n.count == 2, let c = n[0].textValue, let d = n[1].textValue { noEffect = NoEffect(c, d) }
        return LedgerEntry(
            kind: kind, amount: amount, from: a[2].id32, to: a[3].id32, receipt: a[4].textValue, slot: slot,
            noEffect: noEffect)
    }
}

extension FoldRun {
    /// The escrow counter (Specs/projections.md §6.9): every coin event is decided in
    /// merge order against the spending rights of the device that signed
    /// it. Decisions from `start` on are undone and taken again, so a late
    /// event re-decides exactly the part of the ledger it can influence.
    mutating func foldCoins(from start: MergeOrder) throws {
        var rights: [PublicKey: UInt64] = [:]
        func load(_ key: PublicKey) throws -> UInt64 {
            if let r = rights[key] { return r }
            let r = try txn.get(p.state, Table.rights.key(key.bytes)).map { Codec.readU64($0[...]) } ?? 0
            rights[key] = r
            return r
        }

        // Undo, newest first, so rights never pass through a negative value.
        var undone: [([UInt8], LedgerEntry)] = []
        try txn.scan(p.state, from: Table.ledger.key(start.bytes)) { key, value in
            guard key.first == Table.ledger.rawValue else { return false }
            undone.append((key, try LedgerEntry.decode(value)))
            return true
        }
        for (key, entry) in undone.reversed() {
            if entry.isEffective {
                if let from = entry.from { rights[from] = try load(from) + entry.amount }
                if let to = entry.to {
                    let held = try load(to)
                    guard held >= entry.amount else { throw ProjectionError.corrupt("coin rights of \(to.short) below a credit") }
                    rights[to] = held - entry.amount
                }
                if let receipt = entry.receipt { try txn.delete(p.state, Table.receipt.key(Array(receipt.utf8))) }
                if let s = entry.slot { try txn.delete(p.state, Table.slotUnlock.key(s.user.bytes, [UInt8(s.slot)])) }
            }
            try txn.delete(p.state, key)
        }

        let prefix = [ObjectClass.coins.rawValue] + Bytes32.zero.bytes
        var pending: [Fact] = []
        try txn.scan(p.facts, from: prefix + start.bytes) { key, value in
            guard key.starts(with: prefix) else { return false }
            pending.append(try Fact.load(key: key, value: value, log: p.log, in: txn))
            return true
        }
        for f in pending {
            var entry = try decideCoin(f)
            if entry.isEffective, let from = entry.from {
                let held = try load(from)
                if held < entry.amount {
                    entry = LedgerEntry(
                        kind: f.kind, amount: entry.amount, from: from, to: entry.to, receipt: nil, slot: nil,
                        noEffect: NoEffect(
                            "beyond_rights", "device \(from.short) holds rights to \(held) coins and this needs \(entry.amount)"))
                } else {
                    rights[from] = held - entry.amount
                }
            }
            if entry.isEffective {
                if let to = entry.to { rights[to] = try load(to) + entry.amount }
                if let receipt = entry.receipt { try txn.put(p.state, Table.receipt.key(Array(receipt.utf8)), f.id.bytes) }
                if let s = entry.slot { try txn.put(p.state, Table.slotUnlock.key(s.user.bytes, [UInt8(s.slot)]), f.id.bytes) }
            }
            try txn.put(p.state, Table.ledger.key(f.order.bytes), entry.encoded())
            try decide(f.id, entry.noEffect)
        }
        for (key, amount) in rights {
            if amount == 0 {
                try txn.delete(p.state, Table.rights.key(key.bytes))
            } else {
                try txn.put(p.state, Table.rights.key(key.bytes), Codec.u64(amount))
            }
        }
    }

    /// Every rule of a coin event except the rights check, which the ledger
    /// applies in order.
    mutating func decideCoin(_ f: Fact) throws -> LedgerEntry {
        guard let payload = f.payload else { throw ProjectionError.corrupt("\(f.kind.name) fact without its payload") }
        let amount = payload[text: "amount"]?.unsignedValue ?? 0
        func none(_ code: String, _ detail: String) -> LedgerEntry {
            LedgerEntry(kind: f.kind, amount: amount, from: nil, to: nil, receipt: nil, slot: nil, noEffect: NoEffect(code, detail))
        }
        if f.kind == .coinCredited {
            guard p.config.issuers.contains(f.author) else {
                return none("not_issuer", "\(f.author.short) is not an issuer of this network")
            }
            guard let receipt = payload[text: "receipt"]?.textValue else { throw ProjectionError.corrupt("credit without receipt") }
            if let earlier = try txn.get(p.state, Table.receipt.key(Array(receipt.utf8))) {
                return none("duplicate_receipt", "receipt \(receipt) was already credited by event \(Bytes32(earlier)?.short ?? "?")")
            }
            return LedgerEntry(kind: f.kind, amount: amount, from: nil, to: f.object, receipt: receipt, slot: nil, noEffect: nil)
        }
        let user: PublicKey
        switch try actor(f) {
        case .failure(let why): return none(why.code, why.detail)
        case .success(let u): user = u
        }
        switch f.kind {
        case .coinSpent:
            guard f.object == user else { return none("wrong_account", "a device spends from its own user's account \(user.short)") }
            return LedgerEntry(kind: f.kind, amount: amount, from: f.author, to: nil, receipt: nil, slot: nil, noEffect: nil)
        case .coinGiven:
            let recipient = f.object
            let target: PublicKey
            if let device = payload[text: "device"]?.id32 {
                let boundUser = try binding(device)?.user
                let acting = try actingUser(device, at: f.hlc)
                guard device == recipient || boundUser == recipient, acting == recipient else {
                    return none("recipient_device_not_bound", "device \(device.short) is not a device of \(recipient.short) at this point")
                }
                target = device
            } else {
                target = try primaryDevice(of: recipient, at: f.hlc)
            }
            return LedgerEntry(kind: f.kind, amount: amount, from: f.author, to: target, receipt: nil, slot: nil, noEffect: nil)
        case .coinRightsMoved:
            let sibling = f.object
            let siblingUser = try binding(sibling)?.user
            let siblingActing = try actingUser(sibling, at: f.hlc)
            guard sibling != f.author, siblingUser == user, siblingActing == user else {
                return none("not_sibling", "\(sibling.short) is not another device of user \(user.short) at this point")
            }
            return LedgerEntry(kind: f.kind, amount: amount, from: f.author, to: sibling, receipt: nil, slot: nil, noEffect: nil)
        case .slotUnlocked:
            guard let slot = payload[text: "slot"]?.unsignedValue, let price = payload[text: "price"]?.unsignedValue else {
                throw ProjectionError.corrupt("slot.unlocked without slot or price")
            }
            func slotNone(_ code: String, _ detail: String) -> LedgerEntry {
                LedgerEntry(kind: f.kind, amount: price, from: nil, to: nil, receipt: nil, slot: nil, noEffect: NoEffect(code, detail))
            }
            guard f.object == user else { return slotNone("not_owner", "a user unlocks slots of their own profile only") }
            guard slot < UInt64(p.config.slotCount) else {
                return slotNone("no_such_slot", "this network's profiles have \(p.config.slotCount) slots")
            }
            guard slot > 0 else { return slotNone("slot_free", "slot 0 is always unlocked") }
            let expected = p.config.slotPrices[Int(slot)]
            guard price == expected else { return slotNone("wrong_price", "slot \(slot) costs \(expected) coins, not \(price)") }
            if try txn.get(p.state, Table.slotUnlock.key(user.bytes, [UInt8(slot)])) != nil {
                return slotNone("already_unlocked", "slot \(slot) is already unlocked")
            }
            return LedgerEntry(kind: f.kind, amount: price, from: f.author, to: nil, receipt: nil, slot: (user, slot), noEffect: nil)
        default:
            throw ProjectionError.corrupt("\(f.kind.name) filed as a coin fact")
        }
    }
}
