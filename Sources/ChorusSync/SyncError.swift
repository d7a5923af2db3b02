import ChorusCrypto
import ChorusEvents

/// Why a sync session ended without completing (Specs/sync.md §7). `code`
/// is stable and travels in the error message; `isPeerFault` says whether
/// the peer broke the protocol (it is then refused for a while).
public enum SyncError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The peer's frame is not the canonical encoding of a known message: `malformed_message`.
    case malformed(String)
    /// A frame over `limit` bytes (`SyncLimits.maxFrameBytes`): received, or
    /// refused by the transport before its body was read: `frame_too_large`.
    case frameTooLarge(size: Int, limit: Int)
    /// The peer's hello names a protocol version other than
    /// `SyncProtocol.version`: `unsupported_version`.
    case unsupportedVersion(UInt64)
    /// A message that the state machine does not allow at this point: `unexpected_message`.
    case unexpected(String)
    /// An event the peer sent was refused (bad signature, wrong previous id,
    /// non-canonical bytes, ...), `code` naming the event error: `bad_event`.
    case badEvent(code: String, detail: String)
    /// An event outside every range this node requested: `unrequested_event`.
    case unrequestedEvent(String)
    /// A blob chunk that was not requested, arrived out of order, exceeds the
    /// size cap or the declared size, or does not match its hash (Specs/sync.md
    /// §4.4): `bad_blob`.
    case badBlob(String)
    /// The peer reported an error and ended the session: `peer_error`.
    case peerError(code: String, message: String)
    /// The connection ended before both sides said "done": `connection_closed`.
    case connectionClosed
    /// This node refuses the peer for now (it misbehaved recently): `peer_refused`.
    case refused(PublicKey)
    /// The peer's hello did not arrive within `SyncOptions.helloTimeout`: `timeout`.
    case timeout(String)
    /// The session waited for the peer and nothing moved for the idle timeout: `idle_timeout`.
    case idle(String)
    /// A failure on this node (storage, ingest write): `local_failure`.
    case local(String)
    /// The relay at `address` proved another device key than the one its
    /// relay list pins (Specs/sync.md §9), so no session ran: `relay_key_mismatch`.
    case relayKeyMismatch(address: String, expected: PublicKey, proved: PublicKey)

    /// The stable code of Specs/sync.md §7 (`malformed_message`, `bad_event`,
    /// ...), sent in the `error` message and logged.
    public var code: String {
        switch self {
        case .malformed: "malformed_message"
        case .frameTooLarge: "frame_too_large"
        case .unsupportedVersion: "unsupported_version"
        case .unexpected: "unexpected_message"
        case .badEvent: "bad_event"
        case .unrequestedEvent: "unrequested_event"
        case .badBlob: "bad_blob"
        case .peerError: "peer_error"
        case .connectionClosed: "connection_closed"
        case .refused: "peer_refused"
        case .timeout: "timeout"
        case .idle: "idle_timeout"
        case .local: "local_failure"
        case .relayKeyMismatch: "relay_key_mismatch"
        }
    }

    /// Whether the peer is to blame (and is refused for a while).
    public var isPeerFault: Bool {
        switch self {
        case .malformed, .frameTooLarge, .unexpected, .badEvent, .unrequestedEvent, .badBlob: true
        default: false
        }
    }

    /// A one-line human-readable explanation for logs.
    public var description: String {
        switch self {
        case .malformed(let d): "malformed message: \(d)"
        case .frameTooLarge(let size, let limit): "frame of \(size) bytes, over the \(limit)-byte limit"
        case .unsupportedVersion(let v): "peer speaks sync protocol version \(v); this node speaks \(SyncProtocol.version)"
        case .unexpected(let d): "unexpected message: \(d)"
        case .badEvent(let code, let detail): "peer sent an invalid event [\(code)]: \(detail)"
        case .unrequestedEvent(let d): "peer sent an event that was not requested: \(d)"
        case .badBlob(let d): "peer sent a bad blob: \(d)"
        case .peerError(let code, let message): "peer ended the session [\(code)]: \(message)"
        case .connectionClosed: "the connection closed before the sync completed"
        case .refused(let key): "peer \(key.short) is refused for now after misbehaving"
        case .timeout(let d): "timed out: \(d)"
        case .idle(let d): "session idle: \(d)"
        case .local(let d): "local failure: \(d)"
        case .relayKeyMismatch(let address, let expected, let proved):
            "the relay at \(address) proved device key \(proved.short), not \(expected.short) as its relay list says: not syncing with it"
        }
    }
}

extension SyncError {
    /// The session error for a transport failure: an oversized frame or
    /// bytes that are not transport messages are the peer's fault; a
    /// transport idle timeout is an idle session; anything else is a
    /// closed connection.
    static func fromTransport(_ error: any Error) -> SyncError {
        switch error as? SecureConnectionError {
        case .frameTooLarge(let size, let limit): .frameTooLarge(size: size, limit: limit)
        case .decryptionFailed: .malformed("bytes that are not an authentic transport message")
        case .malformedMessage(let why): .malformed("transport: \(why)")
        case .idleTimeout: .idle("the connection made no progress for the transport's idle timeout")
        default: .connectionClosed
        }
    }
}
