import ChorusCrypto
import ChorusNode
import Foundation

/// Sync over the encrypted TCP transport (Specs/sync-transport.md): the
/// node's network key is the PSK, its device key the proved identity.
public enum SyncNetwork {
    /// The transport configuration of a node's store.
    public static func configuration(for node: Node, idleTimeout: Duration = .seconds(120)) throws -> SecureTransportConfiguration {
        SecureTransportConfiguration(
            networkKey: node.network.networkKey, staticKey: try NoiseStaticKeyFile.loadOrCreate(store: node.storePath),
            identity: try deviceKey(store: node.storePath), idleTimeout: idleTimeout)
    }

    /// Connects to `host:port` and runs one session.
    public static func sync(
        _ node: Node, host: String, port: Int, options: SyncOptions = SyncOptions()
    ) async throws -> SyncReport {
        let connection = try await SecureConnection.connect(host: host, port: port, configuration: try configuration(for: node))
        let session = try SyncSession(node: node, transport: connection, options: options, peers: try PeerStore(env: node.log.env))
        return try await session.run()
    }

    /// Parses `HOST:PORT` (an IPv6 host in brackets: `[::1]:7800`).
    public static func parseAddress(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":") else { return nil }
        var host = String(text[..<colon])
        guard let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port), !host.isEmpty else { return nil }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// The store's device signing key (`keys/device.secret`, as written by
    /// ChorusNode's key store: the hex seed, owner-only).
    static func deviceKey(store: String) throws -> SigningKey {
        let path = store + "/keys/device.secret"
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SyncError.local("cannot read the device key \(path)")
        }
        var st = stat()
        if stat(path, &st) == 0, st.st_mode & 0o077 != 0 {
            throw SyncError.local("the device key \(path) is readable by others; run chmod 600 on it")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let seed = Hex.decode(text), let key = SigningKey(seed: seed) else {
            throw SyncError.local("the device key \(path) is not 64 hex digits of an Ed25519 seed")
        }
        return key
    }
}

extension SyncServer {
    /// Binds `host:port` (0 picks a free port) and serves every
    /// authenticated connection in the background until `listener.shutdown()`.
    public func listen(host: String, port: Int) async throws -> SecureListener {
        let log = self.logLine
        let listener = try await SecureListener.bind(
            host: host, port: port, configuration: try SyncNetwork.configuration(for: node),
            onFailure: { address, error in log("connection from \(address) failed before authentication: \(error)") })
        Task { [self] in
            for await connection in listener.connections { accept(connection) }
        }
        return listener
    }
}
