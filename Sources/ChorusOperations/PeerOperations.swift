import ChorusCrypto
import ChorusNode
import ChorusSync
import Foundation

/// The sync peers this node knows and when each last synced, latest first.
/// `GET /v1/peers`; `chorus peers`.
public struct ListPeers: NodeOperation {
    /// `[{"peer", "user", "address", "last_synced_ms", "last_synced", "sessions", "events_received", "events_sent", "position"}, …]`.
    public struct Result: OperationResult {
        /// The peers, latest first.
        package let peers: [PeerRecord]

        struct Peer: Encodable {
            let peer: String
            let user: String?
            let address: String
            let lastSyncedMs: UInt64
            let lastSynced: String
            let sessions: UInt64
            let eventsReceived: UInt64
            let eventsSent: UInt64
            let position: UInt64

            enum CodingKeys: String, CodingKey {
                case peer, user, address, lastSyncedMs = "last_synced_ms", lastSynced = "last_synced", sessions
                case eventsReceived = "events_received", eventsSent = "events_sent", position
            }
        }

        /// An array of peers.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.unkeyedContainer()
            for r in peers {
                try c.encode(
                    Peer(
                        peer: r.key.hex, user: r.user?.hex, address: r.address, lastSyncedMs: r.lastSynced, lastSynced: Self.iso(r.lastSynced),
                        sessions: r.sessions, eventsReceived: r.eventsReceived, eventsSent: r.eventsSent, position: r.position))
            }
        }

        /// Milliseconds since 1970 as ISO 8601, or `never` for 0.
        public static func iso(_ millis: UInt64) -> String {
            guard millis > 0 else { return "never" }
            return ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(millis) / 1000))
        }
    }

    /// The peers of the node it runs on.
    public init() {}

    /// Reads the peer records (none before the first sync).
    public func run(on node: Node) async throws -> Result {
        // A store that never synced has no peers database yet.
        let records = (try? PeerStore(readingFrom: node.store).all()) ?? []
        return Result(peers: records.sorted { $0.lastSynced > $1.lastSynced })
    }
}

extension ListPeers.Result {
    /// `[PEER, …]`; `user` is null until the peer's hello named one.
    public static var schema: JSONSchema {
        .array(
            .object([
                ("peer", .hex32), ("user", .nullable(.hex32)), ("address", .string), ("last_synced_ms", .integer), ("last_synced", .string),
                ("sessions", .integer), ("events_received", .integer), ("events_sent", .integer), ("position", .integer),
            ]))
    }
}
