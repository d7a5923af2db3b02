import ChorusEvents
import Metrics

/// What a node counts (Specs/api.md §8), through swift-metrics: nothing is
/// recorded until the process bootstraps a metrics backend (`chorus serve`
/// exports them for Prometheus at `/metrics`). Created on first use, so the
/// backend must be bootstrapped before the first node opens.
enum NodeMetrics {
    /// Events stored (local mutations and received events).
    static let eventsStored = Counter(label: "chorus_events_stored_total")
    /// Received events already held.
    static let eventsDuplicate = Counter(label: "chorus_events_duplicate_total")
    /// Signatures of received events checked.
    static let signaturesChecked = Counter(label: "chorus_signatures_checked_total")
    /// Received events not checked here because another ingest running at
    /// the same time checked the same signed bytes (`VerificationClaims`).
    static let signaturesShared = Counter(label: "chorus_signatures_shared_total")
    /// Events per durable write transaction.
    static let batchEvents = Recorder(label: "chorus_writer_batch_events", aggregate: true)
    /// Time from a group commit's start to its durable end.
    static let commitSeconds = Metrics.Timer(label: "chorus_writer_commit_seconds")

    /// Events refused, by the error code of Specs/events.md §8.
    static func refused(_ code: String) -> Counter {
        Counter(label: "chorus_events_refused_total", dimensions: [("reason", code)])
    }

    static func record(_ results: [IngestResult]) {
        var refusals: [String: Int] = [:]
        var duplicates = 0
        for r in results {
            switch r {
            case .refused(let error): refusals[error.code, default: 0] += 1
            case .duplicate: duplicates += 1
            default: break
            }
        }
        if duplicates > 0 { eventsDuplicate.increment(by: duplicates) }
        for (code, n) in refusals { refused(code).increment(by: n) }
    }
}
