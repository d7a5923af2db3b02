import CSodium

/// An X25519 key pair (libsodium `crypto_scalarmult`): a device's encryption
/// key, or the one-time key of a key event (Specs/encryption.md §2, §3).
package struct AgreementKey: Sendable {
    /// The 32-byte X25519 package key, `crypto_scalarmult_base(secret)`; this is
    /// what a `device.key` or `chat.key` event publishes.
    package let publicKey: Bytes32
    /// The 32-byte X25519 secret scalar, as given (libsodium clamps it when used).
    package let secret: [UInt8]

    /// Derives the key pair from a 32-byte secret; returns `nil` if `secret` is
    /// not 32 bytes or libsodium rejects it.
    package init?(secret: [UInt8]) {
        guard secret.count == 32 else { return nil }
        requireSodium()
        var pk = [UInt8](repeating: 0, count: 32)
        guard crypto_scalarmult_base(&pk, secret) == 0 else { return nil }
        self.publicKey = Bytes32(unchecked: pk)
        self.secret = secret
    }

    /// Creates a key pair from 32 fresh random bytes (libsodium `randombytes_buf`).
    package static func generate() -> AgreementKey {
        // Any 32 bytes are an X25519 secret (clamped inside libsodium).
        AgreementKey(secret: Random.bytes(32))!
    }

    /// X25519(secret, peer); nil when the result is all zeros (a small-order
    /// peer key), which libsodium reports as failure.
    package func sharedSecret(with peer: Bytes32) -> [UInt8]? {
        requireSodium()
        var out = [UInt8](repeating: 0, count: 32)
        guard crypto_scalarmult(&out, secret, peer.bytes) == 0 else { return nil }
        return out
    }
}

/// XChaCha20-Poly1305-IETF (`crypto_aead_xchacha20poly1305_ietf_*`).
package enum XChaCha20Poly1305 {
    /// Key size in bytes: 32.
    package static let keyLength = 32
    /// Nonce size in bytes: 24, large enough for nonces to be chosen at random.
    package static let nonceLength = 24
    /// Size in bytes of the Poly1305 authentication tag appended to every ciphertext: 16.
    package static let tagLength = 16

    /// Encrypts `message` under `key` and `nonce`, authenticating `ad` too, and
    /// returns `ciphertext || tag` (`message.count + 16` bytes). Traps unless the
    /// key is 32 bytes and the nonce 24; never reuse a nonce with the same key.
    package static func seal(key: [UInt8], nonce: [UInt8], ad: [UInt8], message: [UInt8]) -> [UInt8] {
        precondition(key.count == keyLength && nonce.count == nonceLength, "XChaCha20-Poly1305 key or nonce of wrong length")
        requireSodium()
        var out = [UInt8](repeating: 0, count: message.count + tagLength)
        var outLength: UInt64 = 0
        _ = message.withUnsafeBufferPointer { m in
            ad.withUnsafeBufferPointer { a in
                crypto_aead_xchacha20poly1305_ietf_encrypt(
                    &out, &outLength, m.baseAddress, UInt64(m.count), a.baseAddress, UInt64(a.count), nil, nonce, key)
            }
        }
        return out
    }

    /// `prefix || nonce || AEAD(key, nonce, ad, message)` in one buffer with
    /// a fresh random nonce (`NoncePool`): the layout of a sealed value, built without
    /// intermediate copies (sealing sits on every message's hot path).
    package static func sealWithFreshNonce(key: [UInt8], prefix: [UInt8], ad: [UInt8], message: [UInt8]) -> [UInt8] {
        precondition(key.count == keyLength, "XChaCha20-Poly1305 key of wrong length")
        requireSodium()
        let head = prefix.count + nonceLength
        return [UInt8](unsafeUninitializedCapacity: head + message.count + tagLength) { out, count in
            guard let base = out.baseAddress else { return }
            prefix.withUnsafeBufferPointer { p in
                if let src = p.baseAddress { base.update(from: src, count: p.count) }
            }
            NoncePool.fill(base + prefix.count, count: nonceLength)
            var written: UInt64 = 0
            _ = message.withUnsafeBufferPointer { m in
                ad.withUnsafeBufferPointer { a in
                    crypto_aead_xchacha20poly1305_ietf_encrypt(
                        base + head, &written, m.baseAddress, UInt64(m.count), a.baseAddress, UInt64(a.count), nil,
                        base + prefix.count, key)
                }
            }
            count = head + Int(written)
        }
    }

    /// Opens `sealed[nonceOffset...]` laid out as `nonce || ciphertext || tag`,
    /// without copying the slices out; nil unless the tag verifies.
    package static func open(key: [UInt8], sealed: [UInt8], nonceOffset: Int, ad: [UInt8]) -> [UInt8]? {
        let start = nonceOffset + nonceLength
        guard key.count == keyLength, nonceOffset >= 0, sealed.count >= start + tagLength else { return nil }
        requireSodium()
        let plainLength = sealed.count - start - tagLength
        var ok = false
        let out = [UInt8](unsafeUninitializedCapacity: max(plainLength, 1)) { out, count in
            var outLength: UInt64 = 0
            let status = sealed.withUnsafeBufferPointer { c -> Int32 in
                guard let base = c.baseAddress else { return -1 }
                return ad.withUnsafeBufferPointer { a in
                    crypto_aead_xchacha20poly1305_ietf_decrypt(
                        out.baseAddress, &outLength, nil, base + start, UInt64(c.count - start), a.baseAddress, UInt64(a.count),
                        base + nonceOffset, key)
                }
            }
            ok = status == 0
            count = ok ? Int(outLength) : 0
        }
        return ok ? out : nil
    }

    /// Decrypts `ciphertext || tag` made by ``seal(key:nonce:ad:message:)``; returns
    /// the plaintext, or `nil` unless the tag verifies with this key, nonce and `ad`
    /// (also `nil` for a wrong-sized key or nonce, or input shorter than the tag).
    package static func open(key: [UInt8], nonce: [UInt8], ad: [UInt8], ciphertext: [UInt8]) -> [UInt8]? {
        guard key.count == keyLength, nonce.count == nonceLength, ciphertext.count >= tagLength else { return nil }
        requireSodium()
        var out = [UInt8](repeating: 0, count: ciphertext.count - tagLength)
        var outLength: UInt64 = 0
        let status = ciphertext.withUnsafeBufferPointer { c -> Int32 in
            guard let cipher = c.baseAddress else { return -1 }
            return ad.withUnsafeBufferPointer { a in
                crypto_aead_xchacha20poly1305_ietf_decrypt(
                    &out, &outLength, nil, cipher, UInt64(c.count), a.baseAddress, UInt64(a.count), nonce, key)
            }
        }
        return status == 0 ? out : nil
    }
}

extension Blake2b {
    /// BLAKE2b-256 keyed with a 32-byte key (`crypto_generichash` with a key).
    package static func keyedHash256(key: [UInt8], _ data: [UInt8]) -> Hash32 {
        precondition(key.count == 32, "BLAKE2b key of wrong length")
        requireSodium()
        var out = [UInt8](repeating: 0, count: 32)
        data.withUnsafeBufferPointer { input in
            _ = crypto_generichash(&out, 32, input.baseAddress, UInt64(input.count), key, 32)
        }
        return Bytes32(unchecked: out)
    }
}
