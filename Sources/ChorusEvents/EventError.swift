import ChorusCBOR
import ChorusCrypto

/// Why an event was refused. `code` is stable and machine-readable (the test
/// vectors and `--json` output use it); `description` says what was wrong in
/// words a person can act on.
public enum EventError: Error, Hashable, Sendable, CustomStringConvertible {
    // Encoding (Specs/events.md §2, §3)
    case cbor(CBORError, part: String)
    case malformedEnvelope(String)
    case malformedHeader(String)
    case unsupportedVersion(UInt64)
    case envelopeTooLarge(size: Int)
    case headerTooLarge(size: Int)
    case payloadTooLarge(size: UInt64)
    // Payload (§6)
    case payloadMissing(kind: String)
    case payloadLengthMismatch(declared: UInt64, actual: Int)
    case payloadHashMismatch
    case schemaViolation(kind: String, detail: String)
    // Signature (§5)
    case badSignature
    // Feed (§7), decided against the store
    case sequenceGap(expected: UInt64, got: UInt64)
    case wrongPrevious(seq: UInt64)
    case fork(seq: UInt64, existing: EventID)
    case clockNotIncreasing(seq: UInt64)
    case timestampInFuture(aheadMillis: UInt64, driftMillis: UInt64)

    public var code: String {
        switch self {
        case .cbor(let e, _): e.code
        case .malformedEnvelope: "malformed_envelope"
        case .malformedHeader: "malformed_header"
        case .unsupportedVersion: "unsupported_version"
        case .envelopeTooLarge: "envelope_too_large"
        case .headerTooLarge: "header_too_large"
        case .payloadTooLarge: "payload_too_large"
        case .payloadMissing: "payload_missing"
        case .payloadLengthMismatch: "payload_length_mismatch"
        case .payloadHashMismatch: "payload_hash_mismatch"
        case .schemaViolation: "schema_violation"
        case .badSignature: "bad_signature"
        case .sequenceGap: "sequence_gap"
        case .wrongPrevious: "wrong_previous_id"
        case .fork: "fork"
        case .clockNotIncreasing: "clock_not_increasing"
        case .timestampInFuture: "timestamp_in_future"
        }
    }

    public var description: String {
        switch self {
        case .cbor(let e, let part): "\(part): \(e)"
        case .malformedEnvelope(let d): "malformed event envelope: \(d)"
        case .malformedHeader(let d): "malformed event header: \(d)"
        case .unsupportedVersion(let v): "unsupported event format version \(v) (this node reads version \(EventHeader.formatVersion))"
        case .envelopeTooLarge(let n): "event is \(n) bytes, over the \(EventLimits.maxEnvelopeBytes)-byte limit"
        case .headerTooLarge(let n): "header is \(n) bytes, over the \(EventLimits.maxHeaderBytes)-byte limit"
        case .payloadTooLarge(let n): "payload is \(n) bytes, over the \(EventLimits.maxPayloadBytes)-byte limit"
        case .payloadMissing(let k): "payload of a \(k) event is missing (only purgeable kinds may travel without one)"
        case .payloadLengthMismatch(let d, let a): "payload is \(a) bytes but the header declares \(d)"
        case .payloadHashMismatch: "payload does not match the BLAKE2b-256 hash in the signed header"
        case .schemaViolation(let k, let d): "\(k) payload violates its schema: \(d)"
        case .badSignature: "signature does not verify against the author's key"
        case .sequenceGap(let e, let g): "sequence gap: the feed's next event is \(e), got \(g); the missing events must arrive first"
        case .wrongPrevious(let s): "event \(s) does not chain to the feed's event \(s - 1) (wrong previous id)"
        case .fork(let s, let existing): "fork: the feed already has a different event \(existing.hex) at sequence \(s); evidence kept"
        case .clockNotIncreasing(let s): "event \(s) has a timestamp not after its predecessor's"
        case .timestampInFuture(let a, let d):
            "timestamp is \(a) ms ahead of this node's clock (allowed drift \(d) ms); it will be accepted once the clock catches up"
        }
    }
}

/// Size limits (Specs/events.md §3.4).
public enum EventLimits {
    public static let maxHeaderBytes = 256
    public static let maxPayloadBytes = 65_536
    /// The largest envelope: a 3-item array holding the header, signature
    /// and payload with their byte-string heads.
    public static let maxEnvelopeBytes = 1 + (3 + maxHeaderBytes) + (2 + 64) + (5 + maxPayloadBytes)
}
