import CSodium

// The Noise crypto functions for 25519_ChaChaPoly_BLAKE2b (Noise revision 34,
// sections 4 and 12), on libsodium primitives. HMAC and HKDF are built from
// the plain BLAKE2b-512 hash exactly as section 4.3 defines them; libsodium's
// keyed BLAKE2b is a different function and is deliberately not used.

private let sodiumReady: Bool = sodium_init() >= 0

@inline(__always) func requireSodium() {
    precondition(sodiumReady, "libsodium failed to initialise")
}

/// Overwrites the bytes of `array` with zeros (libsodium's `sodium_memzero`,
/// which the compiler may not elide).
@inline(__always) func wipe(_ array: inout [UInt8]) {
    array.withUnsafeMutableBytes { buf in
        if let base = buf.baseAddress { sodium_memzero(base, buf.count) }
    }
}

/// Secret bytes kept outside Swift's copy-on-write arrays, zeroed when the
/// last reference goes away. Immutable after creation.
public final class SecretBytes: @unchecked Sendable {
    private let storage: UnsafeMutableRawBufferPointer
    public let count: Int

    public init(_ bytes: [UInt8]) {
        count = bytes.count
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        bytes.withUnsafeBytes { src in
            if let s = src.baseAddress, let d = storage.baseAddress { d.copyMemory(from: s, byteCount: src.count) }
        }
    }

    deinit {
        if let base = storage.baseAddress { sodium_memzero(base, storage.count) }
        storage.deallocate()
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: storage.baseAddress, count: count))
    }

    /// A copy as an array; the caller is responsible for wiping it.
    func copy() -> [UInt8] { withUnsafeBytes { Array($0) } }
}

/// An X25519 key pair (Noise DH functions for 25519, section 12.1).
public struct NoiseKeyPair: Sendable {
    public static let length = 32
    public let publicKey: [UInt8]
    public let privateKey: SecretBytes

    /// A key pair from a 32-byte private key (clamping is done by X25519).
    public init(privateKey: [UInt8]) throws(NoiseError) {
        guard privateKey.count == Self.length else {
            throw .invalidKeyLength(expected: Self.length, actual: privateKey.count)
        }
        requireSodium()
        var pub = [UInt8](repeating: 0, count: 32)
        let rc = crypto_scalarmult_base(&pub, privateKey)
        guard rc == 0 else { throw .invalidPrivateKey }
        self.publicKey = pub
        self.privateKey = SecretBytes(privateKey)
    }

    /// GENERATE_KEYPAIR(): a fresh random private key.
    public static func generate() -> NoiseKeyPair {
        requireSodium()
        var secret = [UInt8](repeating: 0, count: 32)
        secret.withUnsafeMutableBytes { if let b = $0.baseAddress { randombytes_buf(b, 32) } }
        defer { wipe(&secret) }
        // A random 32-byte scalar always has a public key.
        guard let pair = try? NoiseKeyPair(privateKey: secret) else { fatalError("X25519 base point multiplication failed") }
        return pair
    }
}

enum X25519 {
    /// DH(key_pair, public_key). An all-zero result (a low-order or invalid
    /// public key) is refused.
    static func dh(_ pair: NoiseKeyPair, _ publicKey: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard publicKey.count == 32 else { throw .invalidKeyLength(expected: 32, actual: publicKey.count) }
        requireSodium()
        var out = [UInt8](repeating: 0, count: 32)
        let rc = pair.privateKey.withUnsafeBytes { sk -> Int32 in
            guard let secret = sk.bindMemory(to: UInt8.self).baseAddress else { return -1 }
            return crypto_scalarmult(&out, secret, publicKey)
        }
        let allZero = out.withUnsafeBufferPointer { sodium_is_zero($0.baseAddress, 32) == 1 }
        guard rc == 0, !allZero else {
            wipe(&out)
            throw .invalidPublicKey
        }
        return out
    }
}

enum ChaChaPoly {
    static let keyLength = 32
    static let tagLength = 16

    /// 96-bit nonce: 32 bits of zeros followed by the little-endian 64-bit counter.
    @inline(__always) static func nonce(_ n: UInt64) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 12)
        for i in 0..<8 { out[4 + i] = UInt8(truncatingIfNeeded: n >> (8 * UInt64(i))) }
        return out
    }

    static func encrypt(key: [UInt8], nonce n: UInt64, ad: [UInt8], plaintext: [UInt8]) -> [UInt8] {
        requireSodium()
        let npub = nonce(n)
        var out = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        var outLength: UInt64 = 0
        plaintext.withUnsafeBufferPointer { m in
            ad.withUnsafeBufferPointer { a in
                _ = crypto_aead_chacha20poly1305_ietf_encrypt(
                    &out, &outLength, m.baseAddress, UInt64(m.count), a.baseAddress, UInt64(a.count), nil, npub, key)
            }
        }
        return out
    }

    static func decrypt(key: [UInt8], nonce n: UInt64, ad: [UInt8], ciphertext: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard ciphertext.count >= tagLength else { throw .messageTooShort(minimum: tagLength, actual: ciphertext.count) }
        requireSodium()
        let npub = nonce(n)
        // Never hand libsodium a nil output pointer, even for an empty plaintext.
        var out = [UInt8](repeating: 0, count: max(ciphertext.count - tagLength, 1))
        var outLength: UInt64 = 0
        let rc = ad.withUnsafeBufferPointer { a in
            crypto_aead_chacha20poly1305_ietf_decrypt(
                &out, &outLength, nil, ciphertext, UInt64(ciphertext.count), a.baseAddress, UInt64(a.count), npub, key)
        }
        guard rc == 0 else {
            wipe(&out)
            throw .decryptionFailed
        }
        out.removeLast(out.count - Int(outLength))
        return out
    }
}

/// BLAKE2b with HASHLEN = 64 and BLOCKLEN = 128, and the HMAC and HKDF the
/// Noise specification builds from it (section 4.3).
public enum NoiseHash {
    public static let hashLength = 64
    public static let blockLength = 128

    /// HASH(data): unkeyed BLAKE2b-512 of the concatenated parts.
    public static func hash(_ parts: [UInt8]...) -> [UInt8] { hash(parts: parts) }

    static func hash(parts: [[UInt8]]) -> [UInt8] {
        requireSodium()
        let raw = UnsafeMutableRawPointer.allocate(byteCount: crypto_generichash_statebytes(), alignment: 64)
        defer {
            sodium_memzero(raw, crypto_generichash_statebytes())
            raw.deallocate()
        }
        let state = OpaquePointer(raw)
        crypto_generichash_init(state, nil, 0, hashLength)
        for part in parts {
            part.withUnsafeBufferPointer { p in _ = crypto_generichash_update(state, p.baseAddress, UInt64(p.count)) }
        }
        var out = [UInt8](repeating: 0, count: hashLength)
        crypto_generichash_final(state, &out, hashLength)
        return out
    }

    /// HMAC-HASH(key, data) per RFC 2104 with BLAKE2b-512.
    public static func hmac(key: [UInt8], data: [[UInt8]]) -> [UInt8] {
        var k = key
        if k.count > blockLength {
            let hashed = hash(parts: [k])
            wipe(&k)
            k = hashed
        }
        k.append(contentsOf: [UInt8](repeating: 0, count: blockLength - k.count))
        var ipad = k.map { $0 ^ 0x36 }
        var opad = k.map { $0 ^ 0x5c }
        wipe(&k)
        var inner = hash(parts: [ipad] + data)
        let out = hash(parts: [opad, inner])
        wipe(&ipad)
        wipe(&opad)
        wipe(&inner)
        return out
    }

    /// HKDF(chaining_key, input_key_material, num_outputs), num_outputs 2 or 3.
    public static func hkdf(chainingKey: [UInt8], inputKeyMaterial: [UInt8], outputs: Int) -> [[UInt8]] {
        precondition(outputs == 2 || outputs == 3, "HKDF produces two or three outputs")
        var temp = hmac(key: chainingKey, data: [inputKeyMaterial])
        defer { wipe(&temp) }
        let o1 = hmac(key: temp, data: [[0x01]])
        let o2 = hmac(key: temp, data: [o1, [0x02]])
        if outputs == 2 { return [o1, o2] }
        let o3 = hmac(key: temp, data: [o2, [0x03]])
        return [o1, o2, o3]
    }
}
