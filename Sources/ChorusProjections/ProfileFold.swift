import ChorusCBOR
import ChorusCrypto
import ChorusEvents

extension FoldRun {
    /// Profile fields: last-writer-wins registers in merge order, written
    /// only by the profile's user (Specs/projections.md §6.2).
    mutating func foldProfile(_ user: PublicKey) throws {
        var registers: [String: (value: CBORValue, fact: Fact)] = [:]
        var relays: (value: CBORValue, fact: Fact)?
        for f in try facts(.profile, user) {
            if f.kind == .relaysSet {
                if let list = try effectiveRelayList(user, f) { relays = (list, f) }
                continue
            }
            guard let (field, value) = try effectiveProfileEdit(user, f) else { continue }
            registers[field] = (value, f)
        }
        var entries: [StateKey: [UInt8]] = [:]
        for (field, r) in registers {
            entries[StateKey(Table.profile.key(user, Array(field.utf8)))] = Self.profileRegister(r.value, r.fact)
        }
        try replace(prefix: Table.profile.key(user), with: entries)
        var list: [StateKey: [UInt8]] = [:]
        if let relays { list[StateKey(Table.relays.key(user))] = Self.profileRegister(relays.value, relays.fact) }
        try replace(prefix: Table.relays.key(user), with: list)
    }

    /// Folds one new `profile.set` into the stored registers, giving the same
    /// state and decisions as `foldProfile` from all facts (Specs/projections.md
    /// §9.1): whether an edit takes effect depends on its own actor and field
    /// only, and a register holds the greatest effective edit, so the new one
    /// replaces it exactly when it is greater. Without this, every edit would
    /// re-read all the earlier edits of its profile.
    mutating func foldProfileFact(_ user: PublicKey, _ f: Fact) throws {
        if f.kind == .relaysSet {
            guard let list = try effectiveRelayList(user, f) else { return }
            let key = Table.relays.key(user)
            if let stored = try txn.get(p.state, key), try Projections.profileRegister(stored).order > f.order { return }
            try txn.put(p.state, key, Self.profileRegister(list, f))
            return
        }
        guard let (field, value) = try effectiveProfileEdit(user, f) else { return }
        let key = Table.profile.key(user, Array(field.utf8))
        if let stored = try txn.get(p.state, key), try Projections.profileRegister(stored).order > f.order { return }
        try txn.put(p.state, key, Self.profileRegister(value, f))
    }

    /// Decides one profile edit (Specs/projections.md §6.2): its field and
    /// value when it takes effect, nil (with the reason recorded) when not.
    private mutating func effectiveProfileEdit(_ user: PublicKey, _ f: Fact) throws -> (String, CBORValue)? {
        guard try actsFor(user, f, notOwner: NoEffect("not_owner", "only devices of user \(user.short) may edit this profile")) else { return nil }
        let edit = try f.read(ProfileSetPayload.self)
        if edit.field.isRetired {
            try decide(f, NoEffect("retired_field", "the profile field \(edit.field.rawValue) is retired and takes no effect: every profile field is public"))
            return nil
        }
        try decide(f, nil)
        return (edit.field.rawValue, edit.value)
    }

    /// Decides one `relays.set` (Specs/projections.md §6.12): the list, as
    /// its payload holds it, when it takes effect; nil (with the reason
    /// recorded) when its author does not act for the user it names.
    private mutating func effectiveRelayList(_ user: PublicKey, _ f: Fact) throws -> CBORValue? {
        guard try actsFor(user, f, notOwner: NoEffect("not_owner", "only user \(user.short) and its devices may set its relay list")) else {
            return nil
        }
        guard let payload = f.payload else { throw ProjectionError.corrupt("relays.set fact without its payload") }
        try decide(f, nil)
        return payload
    }

    static func profileRegister(_ value: CBORValue, _ f: Fact) -> [UInt8] {
        Codec.cbor(.array([value, .unsigned(f.hlc.rawValue), .bytes(f.author.bytes), .bytes(f.id.bytes)]))
    }

    /// Lock slot contents: a register per slot, set by the profile's user
    /// (Specs/projections.md §6.8). Whether the slot is unlocked comes from
    /// the coin ledger and is applied when the slot is read.
    /// Folds one new `slot.set` of `user` into its stored registers when that
    /// gives the state and decisions `foldSlots` gives from all the user's
    /// slot facts (Specs/projections.md §9.1); returns false when the user's
    /// slots must be folded whole (the new one's HLC equals the stored
    /// register's, which names no author to settle the order). Whether one
    /// takes effect depends on its own actor and slot alone, and a register
    /// holds the last effective one in merge order.
    mutating func foldSlotFact(_ user: PublicKey, _ f: Fact) throws -> Bool {
        guard let (slot, picture) = try effectiveSlotSet(user, f) else { return true }
        let key = Table.slot.key(user, UInt8(slot))
        if let stored = try txn.get(p.state, key) {
            guard let register = try Codec.decode(stored, "slot register").arrayValue, register.count == 3,
                let hlc = register[1].unsignedValue
            else { throw ProjectionError.corrupt("slot register of \(stored.count) bytes") }
            guard hlc != f.hlc.rawValue else { return false }
            if hlc > f.hlc.rawValue {
                try decide(f, nil)
                return true
            }
        }
        try decide(f, nil)
        try putState(key, Codec.cbor(.array([picture, .unsigned(f.hlc.rawValue), .bytes(f.id.bytes)])))
        return true
    }

    /// Decides one `slot.set` of `user`: its slot and picture (null when it
    /// empties the slot) when it can take effect, nil with the reason
    /// recorded when not (the caller records it as taking effect).
    private mutating func effectiveSlotSet(_ user: PublicKey, _ f: Fact) throws -> (slot: UInt64, picture: CBORValue)? {
        guard try actsFor(user, f, notOwner: NoEffect("not_owner", "only devices of user \(user.short) may fill its slots")) else { return nil }
        let set = try f.read(SlotSetPayload.self)
        guard set.slot < UInt64(p.config.slotCount) else {
            try decide(f, NoEffect("no_such_slot", "this network's profiles have \(p.config.slotCount) slots"))
            return nil
        }
        return (set.slot, set.picture.map { .bytes($0.bytes) } ?? .null)
    }

    mutating func foldSlots(_ user: PublicKey) throws {
        var registers: [UInt64: (picture: CBORValue, fact: Fact)] = [:]
        for f in try facts(.slots, user) {
            guard let (slot, picture) = try effectiveSlotSet(user, f) else { continue }
            registers[slot] = (picture, f)
            try decide(f, nil)
        }
        var entries: [StateKey: [UInt8]] = [:]
        for (slot, r) in registers {
            entries[StateKey(Table.slot.key(user, UInt8(slot)))] = Codec.cbor(
                .array([r.picture, .unsigned(r.fact.hlc.rawValue), .bytes(r.fact.id.bytes)]))
        }
        try replace(prefix: Table.slot.key(user), with: entries)
    }
}
