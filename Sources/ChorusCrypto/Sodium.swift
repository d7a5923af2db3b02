import CSodium

/// libsodium must be initialised once before use; `sodium_init` is
/// thread-safe and idempotent, and a global `let` runs it exactly once.
private let sodiumReady: Bool = sodium_init() >= 0

@inline(__always) func requireSodium() {
    precondition(sodiumReady, "libsodium failed to initialise")
}

/// Cryptographically secure random bytes from libsodium (`randombytes_buf`).
package enum Random {
    /// Returns `count` fresh random bytes, for keys, seeds and nonces.
    package static func bytes(_ count: Int) -> [UInt8] {
        requireSodium()
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { buf in
            if let base = buf.baseAddress { randombytes_buf(base, count) }
        }
        return out
    }

    /// Returns a fresh random nonce of `count` bytes (1 to 4,096) from
    /// `NoncePool`: unique, not secret, and cheaper than `bytes(_:)`.
    package static func nonce(_ count: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            if let base = out.baseAddress { NoncePool.fill(base, count: count) }
            initialized = count
        }
    }

    /// Returns 32 fresh random bytes, for example a new object id.
    package static func bytes32() -> Bytes32 { Bytes32(unchecked: bytes(32)) }
}

/// BLAKE2b hashing with a 32-byte output (libsodium `crypto_generichash`),
/// the hash behind event ids, payload hashes and blob hashes (Specs/events.md §3.3).
package enum Blake2b {
    /// BLAKE2b with a 32-byte output and no key (`crypto_generichash`).
    package static func hash256(_ data: [UInt8]) -> Hash32 {
        requireSodium()
        return Bytes32.written { out in
            data.withUnsafeBufferPointer { input in
                _ = crypto_generichash(out, 32, input.baseAddress, UInt64(input.count), nil, 0)
            }
        }
    }

    /// Hashes the concatenation of several parts without copying them together.
    package static func hash256(parts: [[UInt8]]) -> Hash32 {
        requireSodium()
        // The state struct is 64-byte aligned, which Swift imports as opaque.
        let raw = UnsafeMutableRawPointer.allocate(byteCount: crypto_generichash_statebytes(), alignment: 64)
        defer { raw.deallocate() }
        let state = OpaquePointer(raw)
        crypto_generichash_init(state, nil, 0, 32)
        for part in parts {
            part.withUnsafeBufferPointer { p in
                _ = crypto_generichash_update(state, p.baseAddress, UInt64(p.count))
            }
        }
        return Bytes32.written { out in _ = crypto_generichash_final(state, out, 32) }
    }
}

/// An Ed25519 key pair. The secret never leaves this value except through
/// `seed`, which is what key files store.
package struct SigningKey: Sendable {
    /// The 32-byte Ed25519 package key, which identifies this key's events as their author.
    package let publicKey: PublicKey
    private let secretKey: [UInt8]  // libsodium's 64-byte form: seed || package key
    /// The 32-byte seed the key pair is derived from; the only secret material
    /// that key files store. Keep it secret.
    package let seed: [UInt8]

    /// Derives the key pair from a 32-byte seed (`crypto_sign_seed_keypair`);
    /// returns `nil` unless `seed` is exactly 32 bytes.
    package init?(seed: [UInt8]) {
        guard seed.count == 32 else { return nil }
        requireSodium()
        var pk = [UInt8](repeating: 0, count: 32)
        var sk = [UInt8](repeating: 0, count: 64)
        guard crypto_sign_seed_keypair(&pk, &sk, seed) == 0 else { return nil }
        self.publicKey = Bytes32(unchecked: pk)
        self.secretKey = sk
        self.seed = seed
    }

    /// Creates a key pair from a fresh random 32-byte seed.
    package static func generate() -> SigningKey {
        // A fresh 32-byte seed always yields a key pair.
        SigningKey(seed: Random.bytes(32))!
    }

    /// Returns the 64-byte detached Ed25519 signature of `message`
    /// (`crypto_sign_detached`); signing is deterministic.
    package func sign(_ message: [UInt8]) -> [UInt8] {
        var sig = [UInt8](repeating: 0, count: 64)
        message.withUnsafeBufferPointer { m in
            _ = crypto_sign_detached(&sig, nil, m.baseAddress, UInt64(m.count), secretKey)
        }
        return sig
    }
}

/// Ed25519 signature verification as Chorus defines it (Specs/events.md §5).
package enum Ed25519 {
    /// Size in bytes of a detached Ed25519 signature: 64.
    package static let signatureLength = 64

    /// libsodium's `crypto_sign_verify_detached`, the rule that defines
    /// validity (Specs/events.md §5): it rejects non-canonical S, small-order
    /// or non-canonical public keys and small-order R.
    package static func verify(signature: [UInt8], message: [UInt8], publicKey: PublicKey) -> Bool {
        verify(signature: signature, prefix: [], message: message, publicKey: publicKey)
    }

    /// `verify` of the message `prefix ‖ message`, joined on the stack: a
    /// verification on every core should not contend for the heap (events
    /// are signed with a context prefix, Specs/events.md §5).
    package static func verify(signature: [UInt8], prefix: [UInt8], message: [UInt8], publicKey: PublicKey) -> Bool {
        guard signature.count == 64 else { return false }
        requireSodium()
        let length = prefix.count + message.count
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(1, length)) { joined in
            guard let base = joined.baseAddress else { return false }
            prefix.withUnsafeBufferPointer { p in
                if let from = p.baseAddress { base.update(from: from, count: p.count) }
            }
            message.withUnsafeBufferPointer { m in
                if let from = m.baseAddress { (base + prefix.count).update(from: from, count: m.count) }
            }
            return publicKey.withUnsafeBytes { key in
                signature.withUnsafeBufferPointer { sig in
                    guard let sig = sig.baseAddress, let key = key.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return false }
                    return crypto_sign_verify_detached(sig, base, UInt64(length), key) == 0
                }
            }
        }
    }
}

extension Blake2b {
    /// Incremental BLAKE2b-256 (`crypto_generichash_init/update/final`), for
    /// inputs too large to hold at once. The result equals `hash256` of the
    /// concatenated updates.
    package final class Hasher {
        private let raw: UnsafeMutableRawPointer
        private var finished = false

        /// Starts an unkeyed BLAKE2b hash with a 32-byte output.
        package init() {
            requireSodium()
            raw = UnsafeMutableRawPointer.allocate(byteCount: crypto_generichash_statebytes(), alignment: 64)
            crypto_generichash_init(OpaquePointer(raw), nil, 0, 32)
        }

        deinit { raw.deallocate() }

        /// Feeds `bytes` into the hash; traps if ``finish()`` has already been called.
        package func update(_ bytes: [UInt8]) {
            precondition(!finished, "hasher already finished")
            bytes.withUnsafeBufferPointer { p in
                _ = crypto_generichash_update(OpaquePointer(raw), p.baseAddress, UInt64(p.count))
            }
        }

        /// Returns the 32-byte digest of everything passed to ``update(_:)``; call it
        /// once only, since the hasher cannot be used afterwards (it traps).
        package func finish() -> Hash32 {
            precondition(!finished, "hasher already finished")
            finished = true
            return Bytes32.written { out in _ = crypto_generichash_final(OpaquePointer(raw), out, 32) }
        }
    }
}

extension Bytes32 {
    /// The 32 bytes a libsodium call writes through `out` (a hash output),
    /// without an intermediate array.
    static func written(by body: (UnsafeMutablePointer<UInt8>) -> Void) -> Bytes32 {
        Bytes32 { raw in
            if let base = raw.baseAddress { body(base.assumingMemoryBound(to: UInt8.self)) }
        }
    }
}
