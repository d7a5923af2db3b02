"""Deterministic CBOR (Specs/events.md §2) and hashing shared by the vector generators."""
import hashlib


def head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if n < 1 << (8 * width):
            return bytes([major << 5 | info]) + n.to_bytes(width, "big")
    raise ValueError(n)


def enc(v):
    if v is None:
        return b"\xf6"
    if v is True:
        return b"\xf5"
    if v is False:
        return b"\xf4"
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode()
        return head(3, len(b)) + b
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(enc(x) for x in v)
    if isinstance(v, dict):
        items = sorted((enc(k), enc(x)) for k, x in v.items())
        return head(5, len(items)) + b"".join(k + x for k, x in items)
    raise TypeError(type(v))


def b2b(data, key=b""):
    return hashlib.blake2b(data, digest_size=32, key=key).digest()


# --- Specs/encryption.md (needs PyNaCl) ---------------------------------------

def ctx(label):
    return label.encode() + b"\x00"


EPOCH_CTX = ctx("chorus/chat-epoch/v1")
KEY_CTX = ctx("chorus/chat-key/v1")
SEALED_CTX = ctx("chorus/sealed/v1")
ATTACHMENT_CTX = ctx("chorus/attachment/v1")
ZERO_NONCE = bytes(24)


def x25519_pub(secret):
    from nacl.bindings import crypto_scalarmult_base
    return crypto_scalarmult_base(secret)


def x25519(secret, public):
    from nacl.bindings import crypto_scalarmult
    shared = crypto_scalarmult(secret, public)
    if shared == bytes(32):
        raise ValueError("small-order public key")
    return shared


def aead(key, nonce, ad, message):
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_encrypt
    return crypto_aead_xchacha20poly1305_ietf_encrypt(message, ad, nonce, key)


def aead_open(key, nonce, ad, ciphertext):
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_decrypt
    return crypto_aead_xchacha20poly1305_ietf_decrypt(ciphertext, ad, nonce, key)


def epoch_id(chat, key):
    return b2b(EPOCH_CTX + chat + key)


def wrap_key(shared, ephemeral_pub, recipient_pub):
    return b2b(KEY_CTX + ephemeral_pub + recipient_pub, key=shared)


def wrap_ad(chat, epoch, device):
    return KEY_CTX + chat + epoch + device


def wraps(epoch_key, chat, epoch, recipients, ephemeral_secret):
    """recipients: [(device Ed25519 key, X25519 public key)]; §5."""
    e_pub = x25519_pub(ephemeral_secret)
    out = b""
    for device, public in sorted(recipients):
        kw = wrap_key(x25519(ephemeral_secret, public), e_pub, public)
        out += device + aead(kw, ZERO_NONCE, wrap_ad(chat, epoch, device), epoch_key)
    return out


def sealed_ad(kind, chat, obj, author):
    return SEALED_CTX + kind.to_bytes(8, "big") + chat + obj + author


def seal(plaintext, epoch_key, chat, nonce, kind, obj, author):
    """§7: epoch || nonce || AEAD(K, nonce, ad, plaintext)."""
    return epoch_id(chat, epoch_key) + nonce + aead(epoch_key, nonce, sealed_ad(kind, chat, obj, author), plaintext)
