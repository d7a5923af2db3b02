import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusProjections
import Foundation

extension Node {
    /// `createNetwork(at:)` for a path (the command line's form).
    package static func createNetwork(
        at path: String, deviceName: String? = nil, slotPrices: [UInt64] = NetworkConfig.defaultSlotPrices,
        options: NodeOptions = NodeOptions()
    ) async throws -> (node: Node, network: NetworkConfig) {
        let issuer = SigningKey.generate()
        let network = NetworkConfig(issuers: [issuer.publicKey], slotPrices: slotPrices, networkKey: Random.bytes32())
        try prepareDirectory(path, network: network)
        try KeyStore.write(issuer, to: KeyStore.issuerKeyPath(path))
        return (try await createIdentity(at: path, deviceName: deviceName, options: options), network)
    }

    // MARK: File URLs and Data

    /// Creates a new store at a file URL, joining `network` (from its
    /// invite: `NetworkConfig(invite:)`), with a fresh user key and device
    /// key, and appends the first event: the user key binding the device
    /// (`device.added`, carrying the device's consent). To found a new
    /// network, `createNetwork(at:)`.
    public static func create(
        at url: URL, deviceName: String? = nil, network: NetworkConfig, options: NodeOptions = NodeOptions()
    ) async throws -> Node {
        try await create(at: try path(of: url), deviceName: deviceName, network: network, options: options)
    }

    /// Opens an existing store at a file URL. Read-write opening takes the
    /// store's writer lock, so two processes never write the same feeds at
    /// once; it waits up to a minute for the lock, then throws
    /// `NodeError.storeInUse`.
    public static func open(at url: URL, readOnly: Bool = false, options: NodeOptions = NodeOptions()) async throws -> Node {
        try await open(at: try path(of: url), readOnly: readOnly, options: options)
    }

    /// Creates a network and its first node, which holds the network's coin
    /// issuer key (a shop's or operator's node), in one call, at a file URL.
    /// Share `network.invite` with every other node of the network
    /// (`NetworkConfig(invite:)`); never build a second `NetworkConfig` for
    /// the same network: a fresh one has a fresh network key.
    public static func createNetwork(
        at url: URL, deviceName: String? = nil, slotPrices: [UInt64] = NetworkConfig.defaultSlotPrices,
        options: NodeOptions = NodeOptions()
    ) async throws -> (node: Node, network: NetworkConfig) {
        try await createNetwork(at: try path(of: url), deviceName: deviceName, slotPrices: slotPrices, options: options)
    }

    /// Creates a store at a file URL for another device of an existing
    /// user: only a device key is made here. The user binds it from a node
    /// holding the user key with `addDevice(_:proof:name:)`, using
    /// `bindingProof()`.
    public static func createDevice(
        at url: URL, user: UserID, network: NetworkConfig, options: NodeOptions = NodeOptions()
    ) async throws -> Node {
        try await createDevice(at: try path(of: url), user: user, network: network, options: options)
    }

    /// The bytes of a live picture, to show it. Throws
    /// `NodeError.refused` with `.unknownPicture` (not received yet),
    /// `.pictureDeleted` (its bytes are purged) or `.pictureBytesUnavailable`
    /// (the picture is here but its bytes are not fetched yet). A photo's
    /// bytes take milliseconds to read, so they are read off the caller's
    /// thread (which in a SwiftUI view is the main thread).
    public nonisolated func pictureData(_ id: PictureID) async throws -> Data {
        try await offTheCaller { try self.readPicture(id) }
    }

    nonisolated func readPicture(_ id: PictureID) throws -> Data {
        countMainThreadByteRead()
        switch try projections.picture(id) {
        case .unknown: throw NodeError.refused(.unknownPicture(id))
        case .deleted: throw NodeError.refused(.pictureDeleted(id))
        case .live(let view):
            guard let blob = view.blob, let bytes = try blobs.read(blob) else { throw NodeError.refused(.pictureBytesUnavailable(id)) }
            return Data(bytes)
        }
    }

    /// The decrypted bytes of a picture sent in a chat, with its type and
    /// size; nil when this device cannot read them (not a member when it was
    /// sent, or its key not shared with this device yet). Decrypting takes
    /// milliseconds, so it runs off the caller's thread.
    public nonisolated func attachmentData(of message: MessageID) async throws -> (data: Data, attachment: Attachment)? {
        try await offTheCaller { try self.readAttachment(of: message).map { (Data($0.bytes), $0.attachment) } }
    }

    private static func path(of url: URL) throws -> String {
        guard url.isFileURL else { throw NodeError.notAFileURL(url.absoluteString) }
        return url.path
    }
}
