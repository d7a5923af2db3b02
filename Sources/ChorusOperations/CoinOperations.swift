import ChorusCrypto
import ChorusEvents
import ChorusNode

/// Move coins (Specs/projections.md §6.9): credit a purchase (issuer key
/// required), spend from this device's rights, give to another user, or
/// move rights to a sibling device. `POST /v1/coins/credit|spend|give|move`;
/// `chorus coins credit|spend|give|move`.
public struct MoveCoins: NodeOperation {
    /// Which movement.
    public enum Movement: Sendable {
        /// A purchase credited to `user` (on `device`, or their first device this node knows), once per `receipt`.
        case credit(user: UserID, receipt: String, device: DeviceID?, product: String?)
        /// Spent from this device's rights, `for` what.
        case spend(for: String)
        /// Given to `user` (on `device`, or their first device), with a note.
        case give(to: UserID, device: DeviceID?, note: String?)
        /// This device's rights moved to a sibling device of the same user.
        case moveRights(to: DeviceID)
    }

    /// The fields each movement reports before the event: credit `user`,
    /// `device`, `amount`; spend `amount`; give `user`, `amount`; move `device`, `amount`.
    public struct Fields: Encodable, Sendable {
        let user: String?
        let device: String?
        let amount: UInt64

        enum Keys: String, CodingKey { case user, device, amount }

        /// Only the fields the movement has.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            if let user { try c.encode(user, forKey: .user) }
            if let device { try c.encode(device, forKey: .device) }
            try c.encode(amount, forKey: .amount)
        }
    }

    /// How many coins (more than 0).
    public let amount: UInt64
    /// The movement.
    public let movement: Movement

    /// `amount` coins moved by `movement`.
    public init(_ amount: UInt64, _ movement: Movement) {
        self.amount = amount
        self.movement = movement
    }

    /// Signs and commits the event; whether it takes effect is the rules' (a spend beyond rights is refused before signing).
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        switch movement {
        case .credit(let user, let receipt, let device, let product):
            let m = try await node.creditCoins(amount, to: user, receipt: receipt, device: device, product: product)
            return MutationReport(
                Fields(user: user.hex, device: m.event.object.hex, amount: amount), m, summary: "Credited \(amount) coins to \(user.short) (receipt \(receipt))")
        case .spend(let purpose):
            return MutationReport(
                Fields(user: nil, device: nil, amount: amount), try await node.spendCoins(amount, for: purpose), summary: "Spent \(amount) coins for \(purpose)")
        case .give(let user, let device, let note):
            return MutationReport(
                Fields(user: user.hex, device: nil, amount: amount), try await node.giveCoins(amount, to: user, device: device, note: note),
                summary: "Gave \(amount) coins to \(user.short)")
        case .moveRights(let device):
            return MutationReport(
                Fields(user: nil, device: device.hex, amount: amount), try await node.moveRights(amount, to: device),
                summary: "Moved rights to \(amount) coins to device \(device.short)")
        }
    }
}

/// Unlock a lock slot of this user's profile (spending its price), or put
/// a picture in an unlocked slot or empty it. `POST /v1/slots/{slot}/unlock`,
/// `POST /v1/slots/{slot}`; `chorus slot unlock|set`.
public struct ChangeSlot: NodeOperation {
    /// What changes.
    public enum Change: Sendable {
        /// Unlocked.
        case unlock
        /// Holds this picture, or nothing.
        case set(PictureID?)
    }

    /// `{"slot": N}`, and for `set`, `"picture"` (null when emptied).
    public struct Fields: Encodable, Sendable {
        let slot: Int
        let picture: String??

        enum Keys: String, CodingKey { case slot, picture }

        /// `slot`, then `picture` for a set (null when emptied).
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(slot, forKey: .slot)
            if let picture {
                if let picture { try c.encode(picture, forKey: .picture) } else { try c.encodeNil(forKey: .picture) }
            }
        }
    }

    /// The slot number.
    public let slot: Int
    /// The change.
    public let change: Change

    /// `change` of `slot`.
    public init(_ slot: Int, _ change: Change) {
        self.slot = slot
        self.change = change
    }

    /// Signs and commits the event.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        switch change {
        case .unlock:
            return MutationReport(Fields(slot: slot, picture: nil), try await node.unlockSlot(slot), summary: "Unlocked slot \(slot)")
        case .set(let picture):
            return MutationReport(
                Fields(slot: slot, picture: .some(picture?.hex)), try await node.setSlot(slot, picture: picture),
                summary: picture.map { "Put picture \($0.short) in slot \(slot)" } ?? "Emptied slot \(slot)")
        }
    }
}

extension MoveCoins.Fields: ReportFields {
    /// `{"user"}` for a gift, `{"device"}` for a move of rights, then `"amount"`.
    public static var fields: [(String, JSONSchema)] { [("user", .hex32), ("device", .hex32), ("amount", .integer)] }
    /// Only a gift names a user, only a move a device.
    public static var optionalFields: Set<String> { ["user", "device"] }
}

extension ChangeSlot.Fields: ReportFields {
    /// `{"slot"}`, and for `set` `"picture"` (null when emptied).
    public static var fields: [(String, JSONSchema)] { [("slot", .integer), ("picture", .nullable(.hex32))] }
    /// An unlock names no picture.
    public static var optionalFields: Set<String> { ["picture"] }
}
