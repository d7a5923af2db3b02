import ChorusCrypto

extension Node {
    /// The node's device signing key (`keys/device.secret`), read with the
    /// key store's checks (owner-only mode, 64 hex digits of an Ed25519
    /// seed). Sync uses it to prove the node's identity in the transport
    /// handshake; nothing else outside this module should need it.
    package nonisolated func deviceSigningKey() throws -> SigningKey {
        try KeyStore.read(KeyStore.deviceKeyPath(storePath))
    }
}
