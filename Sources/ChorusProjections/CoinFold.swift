import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage
import HeapModule

/// The decision the ledger recorded for one coin event (Specs/projections.md §6.9).
package struct LedgerEntry: Hashable, Sendable {
    /// The coin event's kind: `coin.credited`, `coin.spent`, `coin.given`,
    /// `coin.rights.moved` or `slot.unlocked`.
    package let kind: EventKind
    /// Coins the event moves (or would have, without effect): the payload's
    /// `amount`, or the `price` of a `slot.unlocked`.
    package let amount: UInt64
    /// The key whose rights the event debits: the event's author (a device,
    /// or a user key acting as itself).
    package let from: PublicKey?
    /// The key whose rights the event credits.
    package let to: PublicKey?
    /// The receipt an effective credit counted; nil for other kinds and for
    /// entries without effect.
    package let receipt: String?
    /// The user and slot number an effective `slot.unlocked` unlocked; nil
    /// otherwise.
    package let slot: (user: PublicKey, slot: UInt64)?
    /// Why the event took no effect (e.g. `beyond_rights`); nil when it took
    /// effect.
    package let noEffect: NoEffect?

    /// Whether the entry took effect, so its amount moved between rights.
    package var isEffective: Bool { noEffect == nil }

    /// The keys whose rights this entry reads or changes.
    var parties: [PublicKey] { [from, to].compactMap { $0 } }

    /// The coins this entry adds to the supply (Specs/projections.md §6.9):
    /// an effective credit's amount.
    var credited: Int64 { kind == .coinCredited && isEffective ? Int64(amount) : 0 }

    /// Whether the supply at this entry's place decides it: a credit that
    /// takes effect, or one refused only for the supply's limit.
    var dependsOnSupply: Bool { kind == .coinCredited && (isEffective || noEffect?.code == LedgerEntry.supplyExhausted) }

    static let supplyExhausted = "supply_exhausted"

    /// What the entry adds to `key`'s rights.
    func effect(on key: PublicKey) -> Int64 {
        guard isEffective else { return 0 }
        var d: Int64 = 0
        if to == key { d += Int64(amount) }
        if from == key { d -= Int64(amount) }
        return d
    }

    /// Equal when the stored CBOR encodings are equal (the slot tuple keeps the
    /// struct from synthesising `==`).
    package static func == (a: LedgerEntry, b: LedgerEntry) -> Bool { a.encoded() == b.encoded() }
    /// Hashes the stored CBOR encoding, consistently with `==`.
    package func hash(into h: inout Hasher) { h.combine(encoded()) }

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

/// What an incremental ledger walk knows (Specs/projections.md §6.9.1).
struct LedgerWalk {
    /// Rights of the *activated* keys just before the walk's position; the
    /// others hold their stored (final) rights, which no entry of this walk
    /// changes.
    var rights: [PublicKey: Int64] = [:]
    var queue = Heap<MergeOrder>()
    var queued: Set<MergeOrder> = []
    /// Entries whose rules must be applied again (new events, entries whose
    /// inputs changed); other queued entries are re-decided only when their
    /// debited key is activated.
    var dirty: Set<MergeOrder> = []
    /// The supply (Specs/projections.md §6.9.1) is followed loosely until a
    /// credit could reach the limit, then exactly, like a debited key:
    /// `supplyLeft` is the limit less the coins credited just before the
    /// walk's position once the supply is activated, nil before.
    var supplyLeft: Int64? = nil
    /// The coins credited as the state stores it (read at the walk's first credit).
    var storedCredited: Int64? = nil
    /// Before activation: what the walk changed in the coins credited, and
    /// the coins of the credits it made take effect (a bound on how far
    /// the coins credited before any point can have risen).
    var creditedChange: Int64 = 0
    var creditedRise: Int64 = 0

    mutating func add(_ delta: Int64, to key: PublicKey) throws {
        let (sum, overflow) = (rights[key] ?? 0).addingReportingOverflow(delta)
        guard !overflow else { throw ProjectionError.corrupt("coin rights of \(key.short) overflow") }
        rights[key] = sum
    }

    mutating func push(_ order: MergeOrder, dirty isDirty: Bool) {
        if isDirty { dirty.insert(order) }
        if queued.insert(order).inserted { queue.insert(order) }
    }
}

extension FoldRun {
    /// The whole ledger from empty state (a bulk rebuild, Specs/projections.md
    /// §9.2): every coin event decided once, in merge order.
    /// Nothing is stored yet, so every key starts at zero rights and
    /// "activating" one never reads a later entry (`activate`). Run off
    /// the write transaction (`Projections.foldCoinsAlone`), the entries it
    /// writes are buffered, and `ledgerDecided` answers for them where the
    /// walk reads one back.
    mutating func foldCoinsInBulk() throws {
        var walk = LedgerWalk()
        // In merge order: the facts filed under the ledger's one object.
        // Nothing is credited yet: the supply is followed exactly from the start.
        walk.storedCredited = 0
        walk.supplyLeft = p.supplyLimit
        for f in try facts(.coins, .zero) { try processLedgerEntry(f.order, dirty: true, walk: &walk, fact: f) }
        try storeRights(walk)
    }

    /// The escrow counter, incrementally (Specs/projections.md §6.9.1): only
    /// the entries a change can influence are decided again. `dirty` holds
    /// the merge orders of new coin events and of events whose rule inputs
    /// (device bindings) changed.
    mutating func foldCoins(dirty: Set<MergeOrder>) throws {
        var walk = LedgerWalk()
        for order in dirty { walk.push(order, dirty: true) }
        while let order = walk.queue.popMin() {
            try processLedgerEntry(order, dirty: walk.dirty.contains(order), walk: &walk)
        }
        try storeRights(walk)
    }

    private mutating func storeRights(_ walk: LedgerWalk) throws {
        if let stored = walk.storedCredited {
            let credited = walk.supplyLeft.map { p.supplyLimit - $0 } ?? stored + walk.creditedChange
            guard credited >= 0, credited <= p.supplyLimit else { throw ProjectionError.corrupt("coins credited out of range: \(credited)") }
            if credited != stored {
                if credited == 0 {
                    try deleteIndex(IndexTable.supply.key())
                } else {
                    try putIndex(IndexTable.supply.key(), Codec.u64(UInt64(credited)))
                }
            }
        }
        for (key, amount) in walk.rights {
            guard amount >= 0 else { throw ProjectionError.corrupt("coin rights of \(key.short) below zero") }
            if amount == 0 {
                try deleteState(Table.rights.key(key))
            } else {
                try putState(Table.rights.key(key), Codec.u64(UInt64(amount)))
            }
        }
    }

    /// Decides (or re-applies) the ledger entry at `order`: every entry
    /// before it is final. `fact` is the entry's coin fact when it is in
    /// hand (a bulk fold), read from `facts` and the log otherwise.
    private mutating func processLedgerEntry(_ order: MergeOrder, dirty: Bool, walk: inout LedgerWalk, fact: Fact? = nil) throws {
        // A bulk fold decides each entry once, into empty state.
        let old = bulk ? nil : try txn.get(p.state, Table.ledger.key(order)).map { try LedgerEntry.decode($0) }
        var redecide = dirty || old == nil
        if !redecide, let from = old?.from, walk.rights[from] != nil { redecide = true }
        if !redecide, walk.supplyLeft != nil, old?.dependsOnSupply == true { redecide = true }
        guard redecide else {
            // Same decision: carry its effect on the activated keys.
            if let old { for key in old.parties where walk.rights[key] != nil { try walk.add(old.effect(on: key), to: key) } }
            return
        }
        let f: Fact
        if let fact {
            f = fact
        } else {
            guard let raw = try p.fact(Projections.factKey(.coins, .zero, order), in: txn) else {
                throw ProjectionError.corrupt("ledger entry without its coin fact")
            }
            // Filed under the zero object: a coin event naming that object
            // itself has the short (9-byte) value, which names no object.
            f = try Fact.load(order: order, value: raw, filedUnder: .zero, log: p.log, in: txn)
        }
        var entry = try decideCoin(f)
        if entry.isEffective, let from = entry.from {
            try activate(from, at: order, walk: &walk)
            let held = walk.rights[from] ?? 0
            if held < Int64(entry.amount) {
                entry = LedgerEntry(
                    kind: f.kind, amount: entry.amount, from: from, to: entry.to, receipt: nil, slot: nil,
                    noEffect: NoEffect("beyond_rights", "device \(from.short) holds rights to \(held) coins and this needs \(entry.amount)"))
            }
        }
        if entry.kind == .coinCredited || old?.kind == .coinCredited {
            entry = try applySupply(entry, old: old, at: order, walk: &walk)
        }
        for key in Set((old?.parties ?? []) + entry.parties) {
            let before = old?.effect(on: key) ?? 0
            let after = entry.effect(on: key)
            if walk.rights[key] == nil {
                guard before != after else { continue }
                try activate(key, at: order, walk: &walk)
            }
            try walk.add(after, to: key)
        }
        guard entry != old else { return }
        try writeLedgerEntry(order, old: old, new: entry)
        try decide(f, entry.noEffect)
        // A credit or unlock that starts or stops counting changes what
        // the later members of its group (same receipt, same slot) decide.
        // A bulk fold decides every entry in order anyway.
        if !bulk, (old?.isEffective ?? false) != entry.isEffective, let group = Self.coinGroup(f) {
            try txn.scan(p.index, from: IndexTable.coinGroup.key(group, order)) { key, _ in
                guard key.starts(with: IndexTable.coinGroup.key(group)) else { return false }
                let later = try MergeOrder(bytes: key[33...])
                if later != order { walk.push(later, dirty: true) }
                return true
            }
        }
    }

    /// Decides a credit against the supply's limit (Specs/projections.md
    /// §6.9: `supply_exhausted`) and follows the coins credited. Until some
    /// credit could reach the limit, the walk only sums what it changes:
    /// when the coins stored as credited, plus every credit the walk made
    /// take effect, stay within the limit, no credit anywhere in the ledger
    /// can have passed it, and no entry after this one needs reading. Past
    /// that bound (or when the stored supply is within one credit's largest
    /// amount of the limit, where refused credits may exist), the supply is
    /// activated here like a debited key: exact from this point, and every
    /// later credit that depends on it is decided again.
    private mutating func applySupply(_ decided: LedgerEntry, old: LedgerEntry?, at order: MergeOrder, walk: inout LedgerWalk) throws -> LedgerEntry {
        var entry = decided
        if walk.storedCredited == nil {
            let stored = try p.coinsCredited(in: txn)
            guard stored <= UInt64(p.supplyLimit) else { throw ProjectionError.corrupt("coins credited beyond the supply's limit") }
            walk.storedCredited = Int64(stored)
        }
        let stored = walk.storedCredited ?? 0
        let before = old?.credited ?? 0
        if walk.supplyLeft == nil {
            let rise = entry.isEffective ? max(0, Int64(entry.amount) - before) : 0
            let nearLimit = p.supplyLimit - stored < Int64(PayloadLimits.maxCoinAmount)
            let (bound, overflow) = stored.addingReportingOverflow(walk.creditedRise + rise)
            if !nearLimit, !overflow, bound <= p.supplyLimit {
                walk.creditedRise += rise
                walk.creditedChange += entry.credited - before
                return entry
            }
            try activateSupply(at: order, walk: &walk)
        }
        let left = walk.supplyLeft ?? 0
        if entry.isEffective, entry.kind == .coinCredited, left < Int64(entry.amount) {
            entry = LedgerEntry(
                kind: entry.kind, amount: entry.amount, from: nil, to: nil, receipt: nil, slot: nil,
                noEffect: NoEffect(
                    LedgerEntry.supplyExhausted,
                    "the issuers have credited \(p.supplyLimit - left) coins, and \(entry.amount) more would pass the limit of \(p.supplyLimit)"))
        }
        walk.supplyLeft = left - entry.credited
        return entry
    }

    /// Makes the supply left that just before `order`: the limit less the
    /// coins stored as credited and what the walk changed before `order`,
    /// plus every recorded credit at or after `order`, which join the queue.
    private func activateSupply(at order: MergeOrder, walk: inout LedgerWalk) throws {
        var credited = (walk.storedCredited ?? 0) + walk.creditedChange
        for entry in try recordedEntries(listedUnder: IndexTable.supplyCredit.key(), from: order, walk: &walk) {
            credited -= entry.credited
        }
        guard credited >= 0, credited <= p.supplyLimit else { throw ProjectionError.corrupt("coins credited out of range before an entry") }
        walk.supplyLeft = p.supplyLimit - credited
    }

    /// Makes `key`'s rights those just before `order` (its stored rights
    /// minus the effect of every recorded entry at or after `order`), and
    /// queues those entries so the walk decides or re-applies them.
    private func activate(_ key: PublicKey, at order: MergeOrder, walk: inout LedgerWalk) throws {
        guard walk.rights[key] == nil else { return }
        if bulk {
            // No rights stored, and no entry at or after `order` written yet.
            walk.rights[key] = 0
            return
        }
        var held = try txn.get(p.state, Table.rights.key(key)).map { Int64(Codec.readU64($0[...])) } ?? 0
        for entry in try recordedEntries(listedUnder: IndexTable.ledgerParty.key(key), from: order, walk: &walk) {
            held -= entry.effect(on: key)
        }
        guard held >= 0 else { throw ProjectionError.corrupt("coin rights of \(key.short) below zero before an entry") }
        walk.rights[key] = held
    }

    /// The recorded entries at or after `order` that the index lists under
    /// `prefix` (a key's entries, or the credits that depend on the
    /// supply), in merge order; each joins the walk's queue.
    private func recordedEntries(listedUnder prefix: [UInt8], from order: MergeOrder, walk: inout LedgerWalk) throws -> [LedgerEntry] {
        var later: [MergeOrder] = []
        try txn.scan(p.index, from: prefix + order.bytes) { k, _ in
            guard k.starts(with: prefix) else { return false }
            later.append(try MergeOrder(bytes: k[prefix.count...]))
            return true
        }
        return try later.map { o in
            guard let raw = try txn.get(p.state, Table.ledger.key(o)) else {
                throw ProjectionError.corrupt("ledger index names a missing entry")
            }
            walk.push(o, dirty: false)
            return try LedgerEntry.decode(raw)
        }
    }

    private mutating func writeLedgerEntry(_ order: MergeOrder, old: LedgerEntry?, new entry: LedgerEntry) throws {
        try putState(Table.ledger.key(order), entry.encoded())
        if ledgerDecided != nil { ledgerDecided?[order] = entry.isEffective }
        let oldParties = Set(old?.parties ?? []), newParties = Set(entry.parties)
        for key in oldParties.subtracting(newParties) { _ = try txn.delete(p.index, IndexTable.ledgerParty.key(key, order)) }
        for key in newParties.subtracting(oldParties) { try putIndex(IndexTable.ledgerParty.key(key, order), []) }
        if old?.dependsOnSupply == true, !entry.dependsOnSupply {
            try deleteIndex(IndexTable.supplyCredit.key(order))
        } else if entry.dependsOnSupply, old?.dependsOnSupply != true {
            try putIndex(IndexTable.supplyCredit.key(order), [])
        }
        let id = order.id.bytes
        if let old, old.isEffective {
            // Only the record this entry made: a credit earlier in merge
            // order may already have taken the receipt over in this walk.
            if let receipt = old.receipt, !(entry.isEffective && entry.receipt == receipt) {
                let key = Table.receipt.key(Array(receipt.utf8))
                if try txn.get(p.state, key) == id { _ = try txn.delete(p.state, key) }
            }
            if let s = old.slot, !(entry.isEffective && entry.slot?.user == s.user && entry.slot?.slot == s.slot) {
                let key = Table.slotUnlock.key(s.user, UInt8(s.slot))
                if try txn.get(p.state, key) == id { _ = try txn.delete(p.state, key) }
            }
        }
        if entry.isEffective {
            if let receipt = entry.receipt { try putState(Table.receipt.key(Array(receipt.utf8)), id) }
            if let s = entry.slot { try putState(Table.slotUnlock.key(s.user, UInt8(s.slot)), id) }
        }
    }

    /// The group whose members exclude each other (Specs/projections.md
    /// §6.9.1): credits of one receipt, unlocks of one slot.
    static func coinGroup(kind: EventKind, object: Bytes32, payload: CBORValue?) -> Hash32? {
        switch kind {
        case .coinCredited:
            guard let payload, let receipt = (try? CoinCreditedPayload(reading: payload))?.receipt else { return nil }
            return Blake2b.hash256(parts: [Array("chorus/receipt".utf8), [0], Array(receipt.utf8)])
        case .slotUnlocked:
            guard let payload, let slot = (try? SlotUnlockedPayload(reading: payload))?.slot, slot < 256 else { return nil }
            return Blake2b.hash256(parts: [Array("chorus/slot".utf8), [0], object.bytes, [UInt8(slot)]])
        default:
            return nil
        }
    }

    static func coinGroup(_ f: Fact) -> Hash32? { coinGroup(kind: f.kind, object: f.object, payload: f.payload) }

    /// The first effective entry of `group` before `order`, if any.
    func effectiveGroupMember(_ group: Hash32, before order: MergeOrder) throws -> MergeOrder? {
        var found: MergeOrder? = nil
        let prefix = IndexTable.coinGroup.key(group)
        try txn.scan(p.index, prefix: prefix) { key, _ in
            let member = try MergeOrder(bytes: key[33...])
            guard member < order else { return false }
            if let ledgerDecided {
                if ledgerDecided[member] == true {
                    found = member
                    return false
                }
            } else if let raw = try txn.get(p.state, Table.ledger.key(member)), try LedgerEntry.decode(raw).isEffective {
                found = member
                return false
            }
            return true
        }
        return found
    }

    /// Every rule of a coin event except the rights check, which the ledger
    /// applies in order.
    mutating func decideCoin(_ f: Fact) throws -> LedgerEntry {
        // The typed payload of each coin kind (a slot unlock moves its price, not an amount).
        let amount: UInt64
        var credit: CoinCreditedPayload? = nil
        var gift: CoinGivenPayload? = nil
        var unlock: SlotUnlockedPayload? = nil
        switch f.kind {
        case .coinCredited:
            let read = try f.read(CoinCreditedPayload.self)
            (credit, amount) = (read, read.amount)
        case .coinSpent: amount = try f.read(CoinSpentPayload.self).amount
        case .coinGiven:
            let read = try f.read(CoinGivenPayload.self)
            (gift, amount) = (read, read.amount)
        case .coinRightsMoved: amount = try f.read(CoinRightsMovedPayload.self).amount
        case .slotUnlocked:
            unlock = try f.read(SlotUnlockedPayload.self)
            amount = 0
        default: throw ProjectionError.corrupt("\(f.kind.name) filed as a coin fact")
        }
        func none(_ code: String, _ detail: String) -> LedgerEntry {
            LedgerEntry(kind: f.kind, amount: amount, from: nil, to: nil, receipt: nil, slot: nil, noEffect: NoEffect(code, detail))
        }
        if f.kind == .coinCredited {
            guard p.config.issuers.contains(f.author) else {
                return none("not_issuer", "\(f.author.short) is not an issuer of this network")
            }
            guard let receipt = credit?.receipt else { throw ProjectionError.corrupt("credit without receipt") }
            if let group = Self.coinGroup(f), let earlier = try effectiveGroupMember(group, before: f.order) {
                return none("duplicate_receipt", "receipt \(receipt) was already credited by event \(earlier.id.short)")
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
            if let device = gift?.device {
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
            guard let slot = unlock?.slot, let price = unlock?.price else { throw ProjectionError.corrupt("slot.unlocked without slot or price") }
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
            if let group = Self.coinGroup(f), try effectiveGroupMember(group, before: f.order) != nil {
                return slotNone("already_unlocked", "slot \(slot) is already unlocked")
            }
            return LedgerEntry(kind: f.kind, amount: price, from: f.author, to: nil, receipt: nil, slot: (user, slot), noEffect: nil)
        default:
            throw ProjectionError.corrupt("\(f.kind.name) filed as a coin fact")
        }
    }
}
