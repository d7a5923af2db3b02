import ChorusCrypto
import ChorusNode
import Foundation
import Metrics

/// Sync over the encrypted TCP transport (Specs/sync-transport.md): the
/// node's network key is the PSK, its device key the proved identity.
public enum SyncNetwork {
    /// The transport configuration of a node's store. Frames are capped at
    /// the sync protocol's limit (`SyncLimits.maxFrameBytes`), so an
    /// oversized frame is refused before its body is read.
    /// `networkKey` overrides the store's (network.json) for this process,
    /// as `chorus serve --network-key FILE` does.
    package static func configuration(
        for node: Node, networkKey: Bytes32? = nil, idleTimeout: Duration = .seconds(120), handshakeTimeout: Duration = .seconds(10)
    ) throws -> SecureConnectionConfiguration {
        let identity: SigningKey
        do { identity = try node.deviceSigningKey() } catch { throw SyncError.local("cannot use the device key: \(error)") }
        return SecureConnectionConfiguration(
            networkKey: networkKey ?? node.network.networkKey, staticKey: try NoiseStaticKeyFile.loadOrCreate(store: node.storePath),
            identity: identity, maxFrameSize: SyncLimits.maxFrameBytes, handshakeTimeout: handshakeTimeout, idleTimeout: idleTimeout)
    }

    /// Reads a network key file: 64 hex digits (surrounding whitespace
    /// allowed), nothing else. Errors name the file and the problem.
    package static func readNetworkKey(path: String) throws -> Bytes32 {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SyncError.local("cannot read the network key file \(path)")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.utf8.count == 64, let key = Bytes32(hex: text) else {
            throw SyncError.local("the network key file \(path) must hold exactly 64 hex digits (32 bytes), found \(text.utf8.count) characters")
        }
        return key
    }

    /// Connects to `host:port` and runs one session. When the session made
    /// this device share chat keys (`keyEventsWritten`), a second session
    /// delivers them at once, so that one `sync` lets a new member or a
    /// user's new device read the chat.
    /// With `expecting`, the peer must prove that device key (a relay's
    /// pinned key) or no session runs. `connected` is called each time a
    /// connection is authenticated, before its session runs.
    package static func sync(
        _ node: Node, host: String, port: Int, options: SyncOptions = SyncOptions(), expecting: PublicKey? = nil,
        connected: (@Sendable () -> Void)? = nil
    ) async throws -> SyncReport {
        let configuration = try configuration(for: node)
        let peers = try PeerStore(node: node)
        func session() async throws -> SyncReport {
            let connection = try await SecureConnection.connect(host: host, port: port, configuration: configuration)
            if let expecting, connection.peer.key != expecting {
                await connection.close()
                throw SyncError.relayKeyMismatch(address: "\(host):\(port)", expected: expecting, proved: connection.peer.key)
            }
            connected?()
            return try await SyncSession(node: node, transport: connection, options: options, peers: peers).run()
        }
        var report = try await session()
        // A peer that served its budget (Specs/sync.md §5.1) left the rest
        // for another session: continue while sessions still bring events.
        var last = report
        var followUps = 0
        while !report.live, last.partial, last.eventsReceived > 0, followUps < Self.maxFollowUpSessions {
            last = try await session()
            report.add(last)
            followUps += 1
        }
        // Keys this device wrote, or keys the peer wrapped to this device
        // once it learned its device key (when its user is in any chat):
        // one more session delivers them.
        let mayHaveKeys = report.sentDeviceKeys && !((try? node.projections.chats(of: node.identity.user).isEmpty) ?? true)
        if report.keyEventsWritten > 0 || mayHaveKeys, !report.live {
            let delivery = try await session()
            report.add(delivery)
        }
        return report
    }

    /// Sessions a sync runs after a partial one, at most.
    package static let maxFollowUpSessions = 1000

    /// Parses `HOST:PORT` (an IPv6 host in brackets: `[::1]:7800`).
    package static func parseAddress(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":") else { return nil }
        var host = String(text[..<colon])
        guard let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port), !host.isEmpty else { return nil }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }
}

extension SyncServer {
    /// Binds `host:port` (0 picks a free port) and serves every
    /// authenticated connection in the background until `listener.shutdown()`.
    /// `networkKey` overrides the store's network key for this listener;
    /// `handshakeTimeout` bounds each connection's handshake
    /// (Specs/sync-transport.md §6).
    public func listen(
        host: String, port: Int, networkKey: Bytes32? = nil, limits: ConnectionLimits = ConnectionLimits(),
        handshakeTimeout: Duration = .seconds(10)
    ) async throws -> SecureListener {
        let failures = failureLog
        let configuration = try SyncNetwork.configuration(for: node, networkKey: networkKey, handshakeTimeout: handshakeTimeout)
        let listener = try await SecureListener.bind(
            host: host, port: port, configuration: configuration, limits: limits,
            onFailure: { address, error in
                SyncServer.unauthenticatedFailures.increment()
                failures.warning("connection failed before authentication: \(error)", metadata: ["address": "\(address)"])
            })
        Task { [self] in
            for await connection in listener.connections { accept(connection) }
        }
        return listener
    }
}
