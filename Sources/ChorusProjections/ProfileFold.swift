import ChorusCBOR
import ChorusCrypto
import ChorusEvents

extension FoldRun {
    /// Profile fields: last-writer-wins registers in merge order, written
    /// only by the profile's user (Specs/projections.md §6.2).
    mutating func foldProfile(_ user: PublicKey) throws {
        var registers: [String: (value: CBORValue, fact: Fact)] = [:]
        for f in try facts(.profile, user) {
            switch try actor(f) {
            case .failure(let why): try decide(f.id, why)
            case .success(let actor) where actor != user:
                try decide(f.id, NoEffect("not_owner", "only devices of user \(user.short) may edit this profile"))
            case .success:
                guard let payload = f.payload, let field = payload[text: "field"]?.textValue,
                    let value = payload[text: "value"]
                else { throw ProjectionError.corrupt("profile.set fact without its payload") }
                if ProfileField(rawValue: field)?.isRetired == true {
                    try decide(f.id, NoEffect("retired_field", "the profile field \(field) is retired and takes no effect: every profile field is public"))
                    continue
                }
                registers[field] = (value, f)
                try decide(f.id, nil)
            }
        }
        var entries: [[UInt8]: [UInt8]] = [:]
        for (field, r) in registers {
            entries[Table.profile.key(user.bytes, Array(field.utf8))] = Codec.cbor(
                .array([r.value, .unsigned(r.fact.hlc.rawValue), .bytes(r.fact.author.bytes), .bytes(r.fact.id.bytes)]))
        }
        try replace(prefix: Table.profile.key(user.bytes), with: entries)
    }

    /// Lock slot contents: a register per slot, set by the profile's user
    /// (Specs/projections.md §6.8). Whether the slot is unlocked comes from
    /// the coin ledger and is applied when the slot is read.
    mutating func foldSlots(_ user: PublicKey) throws {
        var registers: [UInt64: (picture: CBORValue, fact: Fact)] = [:]
        for f in try facts(.slots, user) {
            switch try actor(f) {
            case .failure(let why): try decide(f.id, why)
            case .success(let actor) where actor != user:
                try decide(f.id, NoEffect("not_owner", "only devices of user \(user.short) may fill its slots"))
            case .success:
                guard let payload = f.payload, let slot = payload[text: "slot"]?.unsignedValue,
                    let picture = payload[text: "picture"]
                else { throw ProjectionError.corrupt("slot.set fact without its payload") }
                guard slot < UInt64(p.config.slotCount) else {
                    try decide(f.id, NoEffect("no_such_slot", "this network's profiles have \(p.config.slotCount) slots"))
                    continue
                }
                registers[slot] = (picture, f)
                try decide(f.id, nil)
            }
        }
        var entries: [[UInt8]: [UInt8]] = [:]
        for (slot, r) in registers {
            entries[Table.slot.key(user.bytes, [UInt8(slot)])] = Codec.cbor(
                .array([r.picture, .unsigned(r.fact.hlc.rawValue), .bytes(r.fact.id.bytes)]))
        }
        try replace(prefix: Table.slot.key(user.bytes), with: entries)
    }
}
