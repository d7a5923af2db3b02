import ChorusCrypto

/// The authenticated peer at the other end of a transport: the Ed25519 key
/// it proved it holds (its node's device key) and where it connected from.
public struct PeerIdentity: Hashable, Sendable {
    /// The Ed25519 device key the peer proved it holds (Specs/sync-transport.md
    /// §3); peer records and bans are keyed by it.
    public let key: PublicKey
    /// Where the peer connected from (`ip:port` over TCP, `memory:a` or
    /// `memory:b` in memory); informative, not authenticated.
    public let address: String

    /// Pairs a proved device key with the address the peer connected from.
    public init(key: PublicKey, address: String) {
        self.key = key
        self.address = address
    }
}

/// An ordered, reliable, authenticated stream of whole frames between two
/// nodes (Specs/sync.md). The TCP implementation encrypts with Noise and
/// fragments large frames; tests use an in-memory pair. `receive` is pull-
/// based: nothing more is read from the network until it is called again,
/// which is how back-pressure reaches the sender.
public protocol FrameTransport: Sendable {
    /// The authenticated peer at the other end.
    var peer: PeerIdentity { get }
    /// Sends one frame; returns once it is handed to the network.
    func send(_ frame: [UInt8]) async throws
    /// The next frame, or nil when the peer closed the connection cleanly.
    func receive() async throws -> [UInt8]?
    /// Closes this end cleanly: the peer receives the frames already sent, then
    /// nil.
    func close() async
}
