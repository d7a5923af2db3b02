import ChorusCBOR
import ChorusCrypto

/// Why an event was refused. `code` is stable and machine-readable (the test
/// vectors and `--json` output use it); `description` says what was wrong in
/// words a person can act on.
package enum EventError: Error, Hashable, Sendable, CustomStringConvertible {
    // Encoding (Specs/events.md §2, §3)
    /// The envelope, header or payload (named by `part`) is not deterministic CBOR;
    /// `code` is the CBOR error's own code (Specs/events.md §2.2).
    case cbor(CBORError, part: String)
    /// The envelope is not an array `[bstr, bstr(64), bstr / null]`; the text says what is wrong.
    case malformedEnvelope(String)
    /// The header is not 9 fields keyed 0...8 of the right types and values
    /// (Specs/events.md §3.2); the text says which.
    case malformedHeader(String)
    /// The header's version (key 0) is not `EventHeader.formatVersion`; carries the version found.
    case unsupportedVersion(UInt64)
    /// The envelope is over `EventLimits.maxEnvelopeBytes`; carries its size in bytes.
    case envelopeTooLarge(size: Int)
    /// The header is over `EventLimits.maxHeaderBytes`; carries its size in bytes.
    case headerTooLarge(size: Int)
    /// The payload length is over `EventLimits.maxPayloadBytes`; carries the length in bytes.
    case payloadTooLarge(size: UInt64)
    // Payload (§6)
    /// The envelope carries `null` instead of the payload of a known kind that is not
    /// purgeable; carries the kind's name.
    case payloadMissing(kind: String)
    /// The payload's length (`actual`) differs from the length the header declares (key 8).
    case payloadLengthMismatch(declared: UInt64, actual: Int)
    /// The payload's BLAKE2b-256 differs from the hash in the signed header (key 7).
    case payloadHashMismatch
    /// The payload breaks its kind's schema (Specs/events.md §6.1, §6.2); `detail` names
    /// the first problem. The event builders also throw it for a kind they cannot build.
    case schemaViolation(kind: String, detail: String)
    // Signature (§5)
    /// The signature does not verify against the author key (Specs/events.md §5),
    /// including when the key itself is unusable.
    case badSignature
    // Feed (§7), decided against the store
    /// `got` is not the feed's next sequence number `expected`: the missing events
    /// must be accepted first (Specs/events.md §7.2).
    case sequenceGap(expected: UInt64, got: UInt64)
    /// The event at `seq` does not name the feed's event `seq - 1` as its `prev`.
    case wrongPrevious(seq: UInt64)
    /// The feed already holds a different event, `existing`, at `seq`; the refused
    /// envelope is kept as evidence.
    case fork(seq: UInt64, existing: EventID)
    /// The event at `seq` has an HLC not greater than its predecessor's.
    case clockNotIncreasing(seq: UInt64)
    /// The timestamp's physical part is `aheadMillis` past this node's clock, more than the allowed
    /// `driftMillis`; the event is accepted if delivered again once the clock catches up.
    case timestampInFuture(aheadMillis: UInt64, driftMillis: UInt64)

    /// The stable, machine-readable error code of Specs/events.md §7.3 (for `.cbor`, the
    /// §2.2 code), as used by the test vectors and `--json` output.
    package var code: String {
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

    /// A sentence saying what was wrong, with the numbers involved, for a person to act on.
    package var description: String {
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
package enum EventLimits {
    /// The largest header, in bytes (`header_too_large` above it); checked before the
    /// header is parsed. A valid header is at most 179 bytes.
    package static let maxHeaderBytes = 256
    /// The largest payload, in bytes (`payload_too_large` above it): bounds both header
    /// key 8 and the encoded payload of a new event.
    package static let maxPayloadBytes = 65_536
    /// The largest envelope: a 3-item array holding the header, signature
    /// and payload with their byte-string heads.
    package static let maxEnvelopeBytes = 1 + (3 + maxHeaderBytes) + (2 + 64) + (5 + maxPayloadBytes)
}
