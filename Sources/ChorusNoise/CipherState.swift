import CSodium

/// Noise CipherState (section 5.1): a key k (or none) and a 64-bit nonce n.
/// Not thread-safe; one owner at a time. The key is zeroed on deinit and rekey.
public final class CipherState {
    /// Largest Noise message (section 3).
    public static let maxMessageLength = 65535
    public static let tagLength = ChaChaPoly.tagLength

    private var k: [UInt8]?
    public private(set) var nonce: UInt64 = 0

    public init() {}

    init(key: [UInt8]) { initializeKey(key) }

    deinit { clear() }

    public var hasKey: Bool { k != nil }

    func initializeKey(_ key: [UInt8]?) {
        clear()
        k = key
        nonce = 0
    }

    /// SetNonce(nonce), for tests and for protocols that carry their own nonces.
    public func setNonce(_ n: UInt64) { nonce = n }

    /// Zeroes and forgets the key.
    public func clear() {
        if k != nil { wipe(&k!) }
        k = nil
    }

    /// EncryptWithAd(ad, plaintext). Without a key, returns the plaintext.
    public func encrypt(ad: [UInt8] = [], plaintext: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard let key = k else { return plaintext }
        guard nonce != UInt64.max else { throw .nonceExhausted }
        let out = ChaChaPoly.encrypt(key: key, nonce: nonce, ad: ad, plaintext: plaintext)
        nonce += 1
        return out
    }

    /// DecryptWithAd(ad, ciphertext). On failure the nonce does not advance.
    public func decrypt(ad: [UInt8] = [], ciphertext: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard let key = k else { return ciphertext }
        guard nonce != UInt64.max else { throw .nonceExhausted }
        let out = try ChaChaPoly.decrypt(key: key, nonce: nonce, ad: ad, ciphertext: ciphertext)
        nonce += 1
        return out
    }

    /// Rekey(): k = first 32 bytes of ENCRYPT(k, 2^64-1, zerolen, zeros). The nonce is unchanged.
    public func rekey() {
        guard let key = k else { return }
        var next = ChaChaPoly.encrypt(key: key, nonce: UInt64.max, ad: [], plaintext: [UInt8](repeating: 0, count: 32))
        let newKey = Array(next.prefix(32))
        wipe(&next)
        let n = nonce
        initializeKey(newKey)
        nonce = n
    }
}

/// Noise SymmetricState (section 5.2).
final class SymmetricState {
    let cipher = CipherState()
    private(set) var ck: [UInt8]
    private(set) var h: [UInt8]

    init(protocolName: String) {
        let name = Array(protocolName.utf8)
        if name.count <= NoiseHash.hashLength {
            h = name + [UInt8](repeating: 0, count: NoiseHash.hashLength - name.count)
        } else {
            h = NoiseHash.hash(name)
        }
        ck = h
    }

    deinit {
        wipe(&ck)
        wipe(&h)
    }

    func mixKey(_ ikm: [UInt8]) {
        var out = NoiseHash.hkdf(chainingKey: ck, inputKeyMaterial: ikm, outputs: 2)
        wipe(&ck)
        ck = out[0]
        cipher.initializeKey(Array(out[1].prefix(32)))
        wipe(&out[1])
    }

    func mixHash(_ data: [UInt8]) {
        h = NoiseHash.hash(h, data)
    }

    func mixKeyAndHash(_ ikm: [UInt8]) {
        var out = NoiseHash.hkdf(chainingKey: ck, inputKeyMaterial: ikm, outputs: 3)
        wipe(&ck)
        ck = out[0]
        mixHash(out[1])
        cipher.initializeKey(Array(out[2].prefix(32)))
        wipe(&out[1])
        wipe(&out[2])
    }

    func encryptAndHash(_ plaintext: [UInt8]) throws(NoiseError) -> [UInt8] {
        let c = try cipher.encrypt(ad: h, plaintext: plaintext)
        mixHash(c)
        return c
    }

    func decryptAndHash(_ ciphertext: [UInt8]) throws(NoiseError) -> [UInt8] {
        let p = try cipher.decrypt(ad: h, ciphertext: ciphertext)
        mixHash(ciphertext)
        return p
    }

    /// Split(): (c1 initiator→responder, c2 responder→initiator).
    func split() -> (CipherState, CipherState) {
        var out = NoiseHash.hkdf(chainingKey: ck, inputKeyMaterial: [], outputs: 2)
        let c1 = CipherState(key: Array(out[0].prefix(32)))
        let c2 = CipherState(key: Array(out[1].prefix(32)))
        wipe(&out[0])
        wipe(&out[1])
        wipe(&ck)
        cipher.clear()
        return (c1, c2)
    }
}
