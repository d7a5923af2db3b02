import ChorusCrypto
import ChorusNode
import ChorusSync
import Foundation

/// Syncs both ways with one peer, or without an address with the relays of
/// the relay lists (Specs/sync.md §9), once (not live). `POST /v1/sync`;
/// `chorus sync`. A peer sync that fails is 503 with the sync's code; a
/// sync by relay lists answers every relay's report or failure, and is 503
/// `relay_sync_failed` with them when any failed.
public struct SyncOnce: NodeOperation {
    /// What the sync did.
    public enum Result: OperationResult {
        /// The report of a sync with one peer.
        case peer(SyncReport)
        /// The relays a sync by relay lists chose, and what each did.
        case relays(RelayPlan, [RelaySyncResult])

        /// The JSON `chorus sync --json` prints.
        public func encode(to encoder: any Encoder) throws {
            switch self {
            case .peer(let report): try syncReportJSON(report).encode(to: encoder)
            case .relays(let plan, let results): try relaySyncJSON(plan, results).encode(to: encoder)
            }
        }

        /// `{…the peer's report}` or `{"relays", "uncovered", "unlisted", "complete"}`.
        public static var schema: JSONSchema { .anyOf([syncReportSchema, relaySyncSchema]) }

        /// Some relays failed: the answer still carries every relay's outcome.
        public var failure: OperationError? {
            guard case .relays(_, let results) = self else { return nil }
            let failed = results.filter { if case .failure = $0.outcome { true } else { false } }.count
            guard failed > 0 else { return nil }
            return OperationError(.unavailable, code: "relay_sync_failed", "\(failed) of \(results.count) relay syncs failed; the others completed")
        }
    }

    /// `HOST:PORT` of the peer; nil: the relays of the relay lists.
    public let address: String?
    /// The replication scope's follow hops (nil: every feed).
    public let hops: Int?
    /// Relay connections open at once, for a sync by relay lists.
    public let maxRelays: Int
    /// Told of a peer sync's progress (the command line draws a bar).
    public let onProgress: (@Sendable (SyncProgress) -> Void)?

    /// A sync with `address`, or by relay lists.
    public init(address: String? = nil, hops: Int? = nil, maxRelays: Int = 8, onProgress: (@Sendable (SyncProgress) -> Void)? = nil) {
        self.address = address
        self.hops = hops
        self.maxRelays = maxRelays
        self.onProgress = onProgress
    }

    /// Runs the sync to its end.
    public func run(on node: Node) async throws -> Result {
        if let hops, hops < 0 { throw OperationError(.badInput, code: "bad_hops", "hops must be 0 or more") }
        guard maxRelays >= 1 else { throw OperationError(.badInput, code: "bad_max_relays", "at most 0 relays at once cannot sync") }
        let scope = ReplicationScope(hops: hops)
        guard let address else {
            let (plan, results) = try await SyncNetwork.syncByRelayLists(
                node, scope: scope, maxConnections: maxRelays, options: SyncOptions(live: false, scope: scope))
            guard !plan.relays.isEmpty else {
                throw OperationError(
                    .unavailable, code: "no_relays",
                    "no relay to sync with: give HOST:PORT, publish your relay list (chorus relays set), or add a bootstrap relay to the network (chorus network relay-add)"
                )
            }
            return .relays(plan, results)
        }
        guard let (host, port) = SyncNetwork.parseAddress(address) else {
            throw OperationError(.badInput, code: "bad_address", "the address must be HOST:PORT with a port up to 65535, got \"\(address.prefix(80))\"")
        }
        var options = SyncOptions(live: false, scope: scope)
        options.onProgress = onProgress
        do {
            return .peer(try await SyncNetwork.sync(node, host: host, port: port, options: options))
        } catch let error as SyncError {
            throw OperationError(.unavailable, code: error.code, "\(error)")
        } catch let error as OperationError {
            throw error
        } catch {
            throw OperationError(.unavailable, code: "sync_failed", "\(error)")
        }
    }
}

/// What `chorus sync HOST:PORT --json` prints.
package func syncReportJSON(_ r: SyncReport) -> JSONValue {
    .object([
        ("peer", .string(r.peer.key.hex)), ("address", .string(r.peer.address)),
        ("complete", .bool(r.complete)), ("live", .bool(r.live)),
        ("events_received", .uint(UInt64(r.eventsReceived))), ("events_sent", .uint(UInt64(r.eventsSent))),
        ("duplicates_received", .uint(UInt64(r.duplicatesReceived))),
        ("blobs_received", .uint(UInt64(r.blobsReceived))), ("blobs_sent", .uint(UInt64(r.blobsSent))),
        ("damaged_blobs", .array(r.damagedBlobs.map { .string($0.hex) })),
        ("forks_seen", .uint(UInt64(r.forksSeen))), ("chat_keys_shared", .uint(UInt64(r.keyEventsWritten))),
        ("chat_keys_error", r.keySharingError.map { .string($0) } ?? .null),
        ("bytes_received", .uint(UInt64(r.bytesReceived))), ("bytes_sent", .uint(UInt64(r.bytesSent))),
        ("frames_received", .uint(UInt64(r.framesReceived))), ("frames_sent", .uint(UInt64(r.framesSent))),
        ("sessions", .uint(UInt64(r.sessions))), ("reconciled", .bool(r.reconciled)), ("partial", .bool(r.partial)),
        ("seconds", .string(String(format: "%.3f", r.seconds))),
    ])
}

/// The schema of `syncReportJSON`.
public let syncReportSchema = JSONSchema.object([
    ("peer", .hex32), ("address", .string), ("complete", .boolean), ("live", .boolean), ("events_received", .integer),
    ("events_sent", .integer), ("duplicates_received", .integer), ("blobs_received", .integer), ("blobs_sent", .integer),
    ("damaged_blobs", .array(.hex32)), ("forks_seen", .integer), ("chat_keys_shared", .integer), ("chat_keys_error", .nullable(.string)),
    ("bytes_received", .integer),
    ("bytes_sent", .integer), ("frames_received", .integer), ("frames_sent", .integer), ("sessions", .integer), ("reconciled", .boolean),
    ("partial", .boolean), ("seconds", .string),
])

/// A relay's report within `relaySyncJSON`.
func relayReportJSON(_ r: SyncReport) -> JSONValue {
    .object([
        ("peer", .string(r.peer.key.hex)), ("address", .string(r.peer.address)),
        ("complete", .bool(r.complete)), ("events_received", .uint(UInt64(r.eventsReceived))), ("events_sent", .uint(UInt64(r.eventsSent))),
        ("blobs_received", .uint(UInt64(r.blobsReceived))), ("blobs_sent", .uint(UInt64(r.blobsSent))),
        ("bytes_received", .uint(UInt64(r.bytesReceived))), ("bytes_sent", .uint(UInt64(r.bytesSent))),
        ("deliveries_left", .uint(UInt64(r.deliveriesLeft))), ("notices_received", .uint(UInt64(r.noticesReceived))),
        ("seconds", .string(String(format: "%.3f", r.seconds))),
    ])
}

/// The stable code of a relay sync's failure.
public func relayFailureCode(_ error: any Error) -> String {
    (error as? SyncError)?.code ?? "connect_failed"
}

/// What `chorus sync --json` prints without an address.
package func relaySyncJSON(_ plan: RelayPlan, _ results: [RelaySyncResult]) -> JSONValue {
    let failed = results.filter { if case .failure = $0.outcome { true } else { false } }
    return .object([
        (
            "relays",
            .array(
                results.map { r in
                    var fields: [(String, JSONValue)] = [
                        ("address", .string(r.relay.address)), ("key", .string(r.relay.key.hex)),
                        ("reasons", .array(r.relay.reasons.map { .string($0) })), ("covers", .array(r.relay.covers.map { .string($0.hex) })),
                    ]
                    switch r.outcome {
                    case .success(let report): fields.append(("report", relayReportJSON(report)))
                    case .failure(let error):
                        fields.append(("error", .string("\(error)")))
                        fields.append(("code", .string(relayFailureCode(error))))
                    }
                    return .object(fields)
                })
        ),
        ("uncovered", .array(plan.uncovered.map { .string($0.hex) })), ("unlisted", .array(plan.unlisted.map { .string($0.hex) })),
        ("complete", .bool(failed.isEmpty)),
    ])
}

/// The schema of `relaySyncJSON`.
public let relaySyncSchema = JSONSchema.object([
    (
        "relays",
        .array(
            .object(
                [
                    ("address", .string), ("key", .hex32), ("reasons", .array(.string)), ("covers", .array(.hex32)),
                    (
                        "report",
                        .object([
                            ("peer", .hex32), ("address", .string), ("complete", .boolean), ("events_received", .integer),
                            ("events_sent", .integer), ("blobs_received", .integer), ("blobs_sent", .integer), ("bytes_received", .integer),
                            ("bytes_sent", .integer), ("deliveries_left", .integer), ("notices_received", .integer), ("seconds", .string),
                        ])
                    ),
                    ("error", .string), ("code", .string),
                ], optional: ["report", "error", "code"]))
    ),
    ("uncovered", .array(.hex32)), ("unlisted", .array(.hex32)), ("complete", .boolean),
])
