import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections

/// A user's devices with their coin rights (Specs/projections.md §6.1).
/// `GET /v1/devices`; `chorus query devices`, `chorus device list`.
public struct ListDevices: NodeOperation {
    /// `[DEVICE, …]`.
    public struct Result: OperationResult {
        /// The devices.
        public let devices: [DeviceView]

        /// An array of devices.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for d in devices { try c.encode(DeviceShape(d)) }
        }
    }

    /// The user, or nil for this node's user.
    public let user: UserID?

    /// The devices of `user` (default: this node's user).
    public init(user: UserID? = nil) { self.user = user }

    /// Reads the devices.
    public func run(on node: Node) async throws -> Result {
        Result(devices: try node.projections.devices(of: user ?? node.identity.user))
    }
}

/// Bind a device to this user, or unbind one (the user key signs it).
/// `POST /v1/devices`, `DELETE /v1/devices/{device}`; `chorus device add|remove`.
public struct ChangeDevice: NodeOperation {
    /// What changes.
    public enum Change: Sendable {
        /// Bound, with the device's signature consenting to this user (64 bytes) and a name.
        case add(proof: [UInt8], name: String?)
        /// Unbound, with a reason kept in the event.
        case remove(reason: String?)
    }

    /// `{"device"}`, and for a binding `"user"`.
    public struct Fields: Encodable, Sendable {
        let device: String
        let user: String?

        enum Keys: String, CodingKey { case device, user }

        /// `device`, then `user` for a binding.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Keys.self)
            try c.encode(device, forKey: .device)
            if let user { try c.encode(user, forKey: .user) }
        }
    }

    /// The device.
    public let device: DeviceID
    /// The change.
    public let change: Change

    /// `change` of `device`.
    public init(_ device: DeviceID, _ change: Change) {
        self.device = device
        self.change = change
    }

    /// Signs the binding or unbinding with the user key and commits it.
    public func run(on node: Node) async throws -> MutationReport<Fields> {
        switch change {
        case .add(let proof, let name):
            let user = node.identity.user
            return MutationReport(
                Fields(device: device.hex, user: user.hex), try await node.addDevice(device, proof: proof, name: name),
                summary: "Bound device \(device.short) to user \(user.short)")
        case .remove(let reason):
            return MutationReport(
                Fields(device: device.hex, user: nil), try await node.removeDevice(device, reason: reason), summary: "Removed device \(device.short)")
        }
    }
}

extension ListDevices.Result {
    /// `[DEVICE, …]`.
    public static var schema: JSONSchema { .array(.ref("Device")) }
}

extension ChangeDevice.Fields: ReportFields {
    /// `{"device"}`, and `"user"` for a binding.
    public static var fields: [(String, JSONSchema)] { [("device", .hex32), ("user", .hex32)] }
    /// A removal names no user.
    public static var optionalFields: Set<String> { ["user"] }
}
