import ChorusCrypto

/// The authenticated peer at the other end of a transport: the Ed25519 key
/// it proved it holds (its node's device key) and where it connected from.
public struct PeerIdentity: Hashable, Sendable {
    public let key: PublicKey
    public let address: String

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
    var peer: PeerIdentity { get }
    /// Sends one frame; returns once it is handed to the network.
    func send(_ frame: [UInt8]) async throws
    /// The next frame, or nil when the peer closed the connection cleanly.
    func receive() async throws -> [UInt8]?
    func close() async
}
