import ChorusNoise

/// Why an encrypted connection failed (Specs/sync-transport.md §7).
package enum SecureConnectionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A handshake message did not verify: almost always a different network
    /// key (PSK), otherwise tampering.
    case handshakeFailed(NoiseError)
    /// The peer closed the connection before the handshake and identity proofs
    /// completed (a peer with another network key does this).
    case closedDuringHandshake
    /// The handshake and identity proofs did not complete within the handshake
    /// timeout (Specs/sync-transport.md §6).
    case handshakeTimeout
    /// Nothing arrived from the peer, or a write could not make progress, for the idle timeout.
    case idleTimeout
    /// The peer's identity proof was malformed or its signature did not verify.
    case identityRejected(String)
    /// A frame larger than the limit: announced by the peer, or passed to `send`.
    case frameTooLarge(size: Int, limit: Int)
    /// A length prefix or message that breaks the framing rules.
    case malformedMessage(String)
    /// A transport message failed authentication (garbage or tampered bytes).
    case decryptionFailed
    /// A Noise failure other than authentication, such as nonce exhaustion.
    case noise(NoiseError)
    /// The connection ended without the peer's close notify.
    case connectionLost
    /// This side closed the connection.
    case closed
    /// `receive` called while another `receive` is waiting.
    case concurrentReceive
    /// The TCP connection to the peer could not be opened.
    case connectFailed(String)
    /// The listener could not bind its address.
    case bindFailed(String)
    /// The listener refused the connection at one of its limits (Specs/sync-transport.md §6a).
    case refusedAtCapacity(ConnectionLimits.Limit)
    /// The peer closed the connection before it answered the first handshake
    /// message: a listener at its connection limits does this.
    case refusedBeforeHandshake
    /// The static key file could not be created, written or read, is readable
    /// by others, or holds no valid key; `problem` says which.
    case keyFile(path: String, problem: String)

    /// A one-line explanation for logs and error messages.
    package var description: String {
        switch self {
        case .handshakeFailed(let e): return "handshake failed (wrong network key?): \(e)"
        case .closedDuringHandshake:
            return "peer closed the connection during the handshake: a different network key, or a listener at its limits dropped it for a newer one"
        case .refusedBeforeHandshake:
            return "peer closed the connection before answering the handshake: it is at its connection limits (try again later) or not a Chorus listener"
        case .handshakeTimeout: return "handshake timed out"
        case .idleTimeout: return "connection idle for too long"
        case .identityRejected(let why): return "peer identity rejected: \(why)"
        case .frameTooLarge(let size, let limit): return "frame of \(size) bytes exceeds the limit of \(limit)"
        case .malformedMessage(let why): return "malformed transport message: \(why)"
        case .decryptionFailed: return "transport message failed authentication"
        case .noise(let e): return "noise: \(e)"
        case .connectionLost: return "connection lost without close notify"
        case .closed: return "connection closed"
        case .concurrentReceive: return "receive called concurrently"
        case .connectFailed(let why): return "cannot connect to \(why)"
        case .bindFailed(let why): return "cannot listen on \(why)"
        case .keyFile(let path, let problem): return "\(path): \(problem)"
        case .refusedAtCapacity(let limit): return "refused at the connection limits: \(limit)"
        }
    }
}

extension SecureConnectionError {
    /// A stable, machine-readable name of the error, in snake case.
    package var code: String {
        switch self {
        case .handshakeFailed: "handshake_failed"
        case .closedDuringHandshake: "closed_during_handshake"
        case .handshakeTimeout: "handshake_timeout"
        case .idleTimeout: "idle_timeout"
        case .identityRejected: "identity_rejected"
        case .frameTooLarge: "frame_too_large"
        case .malformedMessage: "malformed_message"
        case .decryptionFailed: "decryption_failed"
        case .noise: "noise_error"
        case .connectionLost: "connection_lost"
        case .closed: "closed"
        case .concurrentReceive: "concurrent_receive"
        case .connectFailed: "connect_failed"
        case .bindFailed: "bind_failed"
        case .refusedAtCapacity: "refused_at_capacity"
        case .refusedBeforeHandshake: "refused_before_handshake"
        case .keyFile: "key_file"
        }
    }
}
