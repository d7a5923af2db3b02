import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage

/// What a fold decided to purge: the payloads of deleted pictures and
/// messages (by arrival position) and their blobs. The fold only decides;
/// `Store.carryOut` writes it, after the fold, in the same
/// transaction, so a blob is removed only if no object holds it once every
/// object of the transaction is folded (Specs/projections.md §6.3, §6.6).
package struct Purges: Sendable, Equatable {
    /// Arrival positions of the events whose payloads go.
    package internal(set) var payloads: [UInt64] = []
    /// Blobs that go unless a live object still references them.
    package internal(set) var blobs: [Hash32] = []

    /// Nothing to purge.
    package var isEmpty: Bool { payloads.isEmpty && blobs.isEmpty }

    mutating func add(_ other: Purges) {
        payloads += other.payloads
        blobs += other.blobs
    }
}

/// Why an event takes no effect: a stable code and a sentence.
public struct NoEffect: Error, Hashable, Sendable {
    /// The stable reason code (Specs/projections.md §4), e.g. `not_owner`.
    public let code: String
    /// An informative sentence for people; not stable, not for matching.
    public let detail: String
    /// A reason from a stable `code` (Specs/projections.md §4) and a `detail`
    /// sentence.
    package init(_ code: String, _ detail: String) {
        self.code = code
        self.detail = detail
    }
}

/// A device bound to a user by a `device.added` event (Specs/projections.md §6.1).
package struct DeviceBinding: Hashable, Sendable {
    /// The user key that bound the device: the author of the effective
    /// `device.added`.
    package let user: PublicKey
    /// HLC of that `device.added`. The binding also covers the device's events
    /// stamped earlier (Specs/projections.md §3).
    package let addedHLC: HLC
    /// Id of that `device.added` event.
    package let addedBy: EventID
    /// HLC of the effective `device.removed`; events at or after it take no
    /// effect (`device_removed`). nil while the device acts.
    package let removedHLC: HLC?
    /// The `name` of the `device.added` payload; nil when it has none.
    package let name: String?

    func encoded() -> [UInt8] {
        Codec.cbor(
            .array([
                .bytes(user.bytes), .unsigned(addedHLC.rawValue), .bytes(addedBy.bytes),
                removedHLC.map { .unsigned($0.rawValue) } ?? .null, name.map { .text($0) } ?? .null,
            ]))
    }

    static func decode(_ raw: [UInt8]) throws -> DeviceBinding {
        let v = try Codec.decode(raw, "device binding")
        guard let a = v.arrayValue, a.count == 5, let user = a[0].id32, let added = a[1].unsignedValue,
            let by = a[2].id32
        else { throw ProjectionError.corrupt("device binding") }
        return DeviceBinding(
            user: user, addedHLC: HLC(rawValue: added), addedBy: by, removedHLC: a[3].unsignedValue.map(HLC.init(rawValue:)),
            name: a[4].textValue)
    }

    /// The binding's user read in place, for lookups that need nothing
    /// else (the sender of every row a chat list shows): `encoded()` starts
    /// with the array head and the user's 32-byte string. Any other layout
    /// is decoded whole.
    static func user(of raw: [UInt8]) throws -> PublicKey {
        if raw.count >= 35, raw[0] == 0x85, raw[1] == 0x58, raw[2] == 0x20, let user = Bytes32(raw[3..<35]) { return user }
        return try decode(raw).user
    }

    /// The message a device signs to consent to being bound to `user`.
    package static func proofMessage(user: PublicKey) -> [UInt8] {
        Array("chorus/device-binding/v1".utf8) + [0] + user.bytes
    }

    /// The `proof` a `device.added` payload carries: `device`'s signature over
    /// `proofMessage(user:)` (Specs/projections.md §6.1).
    package static func proof(device: SigningKey, user: PublicKey) -> [UInt8] {
        device.sign(proofMessage(user: user))
    }
}
