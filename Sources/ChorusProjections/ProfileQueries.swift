import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusStorage

/// One profile field register (Specs/projections.md §6.2): the value of the
/// winning `profile.set` and who wrote it.
public struct ProfileFieldValue: Hashable, Sendable, Codable {
    /// The field name, e.g. `name`, `bio` or `avatar` (Specs/events.md §6.2.3).
    public let name: String
    /// The winning value; `.null` when the field was cleared.
    package let value: CBORValue
    /// HLC of the winning `profile.set`.
    public let hlc: HLC
    /// The device (or user key) that signed the winning `profile.set`.
    public let author: PublicKey
    /// Id of the winning `profile.set`.
    public let event: EventID
}

/// A device bound to a user, with its coin rights (Specs/projections.md §6.1,
/// §6.9).
public struct DeviceView: Hashable, Sendable, Codable {
    /// The device's public key.
    public let device: DeviceID
    /// The name its `device.added` gave; nil when none.
    public let name: String?
    /// HLC of the `device.added` that bound it.
    public let addedHLC: HLC
    /// HLC of its effective removal; nil while it acts for the user.
    public let removedHLC: HLC?
    /// Its spending rights in coins; a removed device keeps them.
    public let rights: UInt64
}

/// A user's profile as this node projects it: field registers, the resolved
/// avatar and the user's devices.
public struct ProfileView: Hashable, Sendable, Codable {
    /// The user key the profile belongs to.
    public let user: UserID
    /// The fields set (a cleared field holds `null`), by name.
    public let fields: [ProfileFieldValue]
    /// The avatar field resolved: nil when unset or cleared.
    public let avatar: PictureReference?
    /// Every device ever bound to the user, removed ones included, oldest
    /// binding first (added HLC, then key).
    public let devices: [DeviceView]

    /// The value of field `name`: nil when it was never set, `.null` when it
    /// was cleared.
    package func field(_ name: String) -> CBORValue? { fields.first { $0.name == name }?.value }
}

/// A user's relay list as this node projects it (Specs/projections.md
/// §6.12): the relays of the greatest effective `relays.set`.
public struct RelayListView: Hashable, Sendable, Codable {
    /// The user the list belongs to.
    public let user: UserID
    /// The relays, in the user's order of preference (empty: cleared).
    public let relays: [Relay]
    /// The clock of the event that set the list.
    public let hlc: HLC
    /// The device (or user key) that signed it.
    public let author: PublicKey
    /// The event that set the list.
    public let event: EventID
}

extension Projections {
    /// `user`'s profile: fields in name order, the avatar resolved (only the
    /// user's own picture shows) and devices. Empty when nothing is held.
    package func profile(_ user: UserID) throws -> ProfileView {
        try profile(user.raw)
    }

    package func profile(_ user: PublicKey) throws -> ProfileView {
        try log.env.read { txn in
            var fields: [ProfileFieldValue] = []
            try txn.scan(state, prefix: Table.profile.key(user)) { key, value in
                let name = String(decoding: key[33...], as: UTF8.self)
                let register = try Self.profileRegister(value)
                fields.append(
                    ProfileFieldValue(
                        name: name, value: register.value, hlc: register.order.hlc, author: register.order.author, event: register.order.id))
                return true
            }
            let avatar = fields.first { $0.name == "avatar" }?.value.id32
            return ProfileView(
                user: UserID(user), fields: fields,
                avatar: try avatar.map { try reference($0, requiredOwner: user, in: txn) },
                devices: try devices(of: user, in: txn))
        }
    }

    /// `user`'s relay list (Specs/projections.md §6.12): nil when the user
    /// has published none that took effect.
    package func relays(of user: UserID) throws -> RelayListView? {
        try log.env.read { txn in
            guard let value = try txn.get(state, Table.relays.key(user.raw)) else { return nil }
            let register = try Self.profileRegister(value)
            let payload: RelaysSetPayload
            do { payload = try RelaysSetPayload(reading: register.value) } catch {
                throw ProjectionError.corrupt("the relay list of \(user.raw.short) does not read: \(error)")
            }
            return RelayListView(
                user: user, relays: payload.relays, hlc: register.order.hlc, author: register.order.author, event: register.order.id)
        }
    }

    /// Every user's relay list this node holds, by user key.
    package func relayLists() throws -> [RelayListView] {
        var users: [UserID] = []
        try log.env.read { txn in
            try txn.scan(state, prefix: [Table.relays.rawValue]) { key, _ in
                users.append(UserID(try Codec.b32(key.dropFirst(), "relay list user")))
                return true
            }
        }
        return try users.compactMap { try relays(of: $0) }
    }

    /// Every device ever bound to `user`, removed ones included, oldest binding
    /// first (added HLC, then key), each with its rights.
    package func devices(of user: UserID) throws -> [DeviceView] {
        try log.env.read { txn in try devices(of: user.raw, in: txn) }
    }

    package func devices(of user: PublicKey) throws -> [DeviceView] {
        try log.env.read { txn in try devices(of: user, in: txn) }
    }

    func devices(of user: PublicKey, in txn: Transaction) throws -> [DeviceView] {
        var out: [DeviceView] = []
        var keys: [PublicKey] = []
        try txn.scan(state, prefix: Table.userDevice.key(user)) { key, _ in
            keys.append(try Codec.b32(key[33...], "device"))
            return true
        }
        for d in keys {
            guard let raw = try txn.get(state, Table.device.key(d)) else { continue }
            let b = try DeviceBinding.decode(raw)
            out.append(
                DeviceView(device: DeviceID(d), name: b.name, addedHLC: b.addedHLC, removedHLC: b.removedHLC, rights: try rights(d, in: txn)))
        }
        return out.sorted { ($0.addedHLC, $0.device) < ($1.addedHLC, $1.device) }
    }

    /// Of `keys`, those that have bound a device (user keys: Table.userDevice
    /// holds every device a key ever bound), read in one transaction.
    package func bindingDevices(among keys: some Sequence<PublicKey>) throws -> Set<PublicKey> {
        try log.env.read { txn in
            var binders: Set<PublicKey> = []
            for key in keys where !binders.contains(key) {
                try txn.scan(state, prefix: Table.userDevice.key(key)) { _, _ in
                    binders.insert(key)
                    return false
                }
            }
            return binders
        }
    }

    /// Every key that has bound a device (every user key this node knows),
    /// in one scan of Table.userDevice.
    package func bindingUsers() throws -> Set<PublicKey> {
        try log.env.read { txn in
            var users: Set<PublicKey> = []
            var last: ArraySlice<UInt8> = []
            try txn.scan(state, prefix: [Table.userDevice.rawValue]) { key, _ in
                let user = key.dropFirst().prefix(32)
                if user != last {
                    users.insert(try Codec.b32(user, "binding user"))
                    last = user
                }
                return true
            }
            return users
        }
    }

    /// The user a key acts for now (itself unless it is a bound device).
    package func user(of key: PublicKey) throws -> PublicKey {
        try log.env.read { txn in
            try txn.get(state, Table.device.key(key)).map(DeviceBinding.user(of:)) ?? key
        }
    }

    /// The binding of `device` (Specs/projections.md §6.1); nil when this node
    /// holds no effective `device.added` for it.
    package func binding(of device: PublicKey) throws -> DeviceBinding? {
        try log.env.read { txn in try txn.get(state, Table.device.key(device)).map(DeviceBinding.decode) }
    }
}

extension Projections {
    /// A stored profile register (Specs/projections.md §6.2): the winning
    /// value and the merge order of the edit that wrote it.
    static func profileRegister(_ bytes: [UInt8]) throws -> (value: CBORValue, order: MergeOrder) {
        let v = try Codec.decode(bytes, "profile register")
        guard let a = v.arrayValue, a.count == 4, let hlc = a[1].unsignedValue, let author = a[2].id32, let id = a[3].id32 else {
            throw ProjectionError.corrupt("profile register")
        }
        return (a[0], MergeOrder(hlc: HLC(rawValue: hlc), author: author, id: id))
    }
}
