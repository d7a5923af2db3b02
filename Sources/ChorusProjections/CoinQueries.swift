import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// A user's coin balance (Specs/projections.md §6.9): the rights of every
/// device ever bound to them plus those of the user key.
public struct BalanceView: Hashable, Sendable, Codable {
    /// The user key the balance belongs to.
    public let user: UserID
    /// The balance in coins: every device's rights plus `userKeyRights`.
    public let total: UInt64
    /// Every device ever bound to the user, removed ones included (their coins
    /// are still the user's), oldest binding first, each with its rights.
    public let devices: [DeviceView]
    /// Rights held by the user key itself (gifts to a user with no device).
    public let userKeyRights: UInt64
}

/// One lock slot of a profile (Specs/projections.md §6.8): its price, whether
/// it is unlocked and the picture it shows.
public struct SlotView: Hashable, Sendable, Codable {
    /// The slot number, from 0 (always free and unlocked).
    public let slot: Int
    /// The configured price of the slot in coins (`NetworkConfig.slotPrices`).
    public let price: UInt64
    /// True for slot 0 and for a slot an effective `slot.unlocked` unlocked.
    public let unlocked: Bool
    /// The picture in the slot, resolved when read (Specs/projections.md §7.1);
    /// nil when the slot is locked or empty.
    public let picture: PictureReference?
}

extension Projections {
    // MARK: Coins and slots

    func rights(_ key: PublicKey, in txn: Transaction) throws -> UInt64 {
        try txn.get(state, Table.rights.key(key)).map { Codec.readU64($0[...]) } ?? 0
    }

    /// The coins the effective credits add up to (Specs/projections.md
    /// §6.9): every coin ever issued, at most `supplyLimit`.
    package func coinsCredited() throws -> UInt64 {
        try log.env.read { txn in try coinsCredited(in: txn) }
    }

    func coinsCredited(in txn: Transaction) throws -> UInt64 {
        try txn.get(index, IndexTable.supply.key()).map { Codec.readU64($0[...]) } ?? 0
    }

    /// Spending rights of one device.
    package func rights(of device: DeviceID) throws -> UInt64 {
        try rights(of: device.raw)
    }

    /// Spending rights of any key: a device, or a user key given coins
    /// while it had no device.
    package func rights(of key: PublicKey) throws -> UInt64 {
        try log.env.read { txn in try rights(key, in: txn) }
    }

    /// A user's balance: the rights of every device bound to them (removed
    /// devices included: their coins are still the user's) plus any held by
    /// the user key itself.
    package func balance(of user: UserID) throws -> BalanceView {
        try balance(of: user.raw)
    }

    package func balance(of user: PublicKey) throws -> BalanceView {
        try log.env.read { txn in
            let devices = try devices(of: user, in: txn)
            let own = try rights(user, in: txn)
            // At most the coins ever credited (§6.9), below 2^63: a sum
            // past it is a damaged store, not a count to wrap or trap on.
            var total = own
            for device in devices {
                let (sum, overflow) = total.addingReportingOverflow(device.rights)
                guard !overflow else { throw ProjectionError.corrupt("the coin rights of \(user.short)'s devices add up past 2^64") }
                total = sum
            }
            return BalanceView(user: UserID(user), total: total, devices: devices, userKeyRights: own)
        }
    }

    /// Every lock slot of `user`'s profile, one per configured slot, in slot
    /// number order. A locked slot shows no picture even when one was set.
    package func slots(of user: UserID) throws -> [SlotView] {
        try slots(of: user.raw)
    }

    package func slots(of user: PublicKey) throws -> [SlotView] {
        try log.env.read { txn in
            try config.slotPrices.enumerated().map { slot, price in
                let unlockedBy = try txn.get(state, Table.slotUnlock.key(user, UInt8(slot)))
                let unlocked = slot == 0 || unlockedBy != nil
                var picture: PictureReference? = nil
                if unlocked, let raw = try txn.get(state, Table.slot.key(user, UInt8(slot))) {
                    let v = try Codec.decode(raw, "slot register")
                    if let id = v.arrayValue?.first?.id32 { picture = try reference(id, requiredOwner: user, in: txn) }
                }
                return SlotView(slot: slot, price: price, unlocked: unlocked, picture: picture)
            }
        }
    }

    /// Every coin decision in merge order (for audits).
    package func ledger() throws -> [(order: MergeOrder, entry: LedgerEntry)] {
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
    package func receipts() throws -> [(receipt: String, event: EventID)] {
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
    package func allRights() throws -> [(key: PublicKey, rights: UInt64)] {
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
