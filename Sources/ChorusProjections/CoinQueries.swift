import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

public struct BalanceView: Hashable, Sendable {
    public let user: PublicKey
    public let total: UInt64
    public let devices: [DeviceView]
    /// Rights held by the user key itself (gifts to a user with no device).
    public let userKeyRights: UInt64
}

public struct SlotView: Hashable, Sendable {
    public let slot: Int
    public let price: UInt64
    public let unlocked: Bool
    public let picture: PictureReference?
}

extension Projections {
    // MARK: Coins and slots

    func rights(_ key: PublicKey, in txn: Transaction) throws -> UInt64 {
        try txn.get(state, Table.rights.key(key.bytes)).map { Codec.readU64($0[...]) } ?? 0
    }

    /// Spending rights of one device (or key).
    public func rights(of key: PublicKey) throws -> UInt64 {
        try log.env.read { txn in try rights(key, in: txn) }
    }

    /// A user's balance: the rights of every device bound to them (removed
    /// devices included: their coins are still the user's) plus any held by
    /// the user key itself.
    public func balance(of user: PublicKey) throws -> BalanceView {
        try log.env.read { txn in
            let devices = try devices(of: user, in: txn)
            let own = try rights(user, in: txn)
            return BalanceView(user: user, total: devices.reduce(own) { $0 + $1.rights }, devices: devices, userKeyRights: own)
        }
    }

    public func slots(of user: PublicKey) throws -> [SlotView] {
        try log.env.read { txn in
            try config.slotPrices.enumerated().map { slot, price in
                let unlockedBy = try txn.get(state, Table.slotUnlock.key(user.bytes, [UInt8(slot)]))
                let unlocked = slot == 0 || unlockedBy != nil
                var picture: PictureReference? = nil
                if unlocked, let raw = try txn.get(state, Table.slot.key(user.bytes, [UInt8(slot)])) {
                    let v = try Codec.decode(raw, "slot register")
                    if let id = v.arrayValue?.first?.id32 { picture = try reference(id, requiredOwner: user, in: txn) }
                }
                return SlotView(slot: slot, price: price, unlocked: unlocked, picture: picture)
            }
        }
    }

    /// Every coin decision in merge order (for audits).
    public func ledger() throws -> [(order: MergeOrder, entry: LedgerEntry)] {
        try log.env.read { txn in
            var out: [(MergeOrder, LedgerEntry)] = []
            try txn.scan(state, prefix: [Table.ledger.rawValue]) { key, value in
                out.append((try MergeOrder(bytes: key[1...]), try LedgerEntry.decode(value)))
                return true
            }
            return out
        }
    }

    /// Every receipt credited, with the event that credited it.
    public func receipts() throws -> [(receipt: String, event: EventID)] {
        try log.env.read { txn in
            var out: [(String, EventID)] = []
            try txn.scan(state, prefix: [Table.receipt.rawValue]) { key, value in
                out.append((String(decoding: key[1...], as: UTF8.self), try Codec.b32(value[...], "event id")))
                return true
            }
            return out
        }
    }

    /// Rights of every key holding any, in key order.
    public func allRights() throws -> [(key: PublicKey, rights: UInt64)] {
        try log.env.read { txn in
            var out: [(PublicKey, UInt64)] = []
            try txn.scan(state, prefix: [Table.rights.rawValue]) { key, value in
                out.append((try Codec.b32(key[1...], "rights key"), Codec.readU64(value[...])))
                return true
            }
            return out
        }
    }
}
