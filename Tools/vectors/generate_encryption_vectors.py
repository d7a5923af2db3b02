#!/usr/bin/env python3
"""Generates Specs/vectors/encryption.json from Specs/encryption.md alone.

An independent implementation of chat encryption (Python: PyNaCl for X25519
and XChaCha20-Poly1305, hashlib for BLAKE2b, `cryptography` for Ed25519).
Every secret and nonce is fixed, so the Swift suite checks every byte.
Run from the repository root:

    python3 Tools/vectors/generate_encryption_vectors.py > Specs/vectors/encryption.json
"""
import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from chorus_vectors import (ATTACHMENT_CTX, KEY_CTX, ZERO_NONCE, aead, aead_open, b2b, enc, epoch_id, sealed_ad, seal,
                            wrap_ad, wrap_key, wraps, x25519, x25519_pub)

KIND = {"chat.created": 40, "message.sent": 43, "message.edited": 44}


class Device:
    def __init__(self, name):
        self.name = name
        self.seed = b2b(b"chorus encryption vector device " + name.encode())
        self.pk = Ed25519PrivateKey.from_private_bytes(self.seed).public_key().public_bytes_raw()
        self.x_secret = b2b(b"chorus encryption vector x25519 " + name.encode())
        self.x_public = x25519_pub(self.x_secret)

    def json(self):
        return {"name": self.name, "ed25519_seed": self.seed.hex(), "device": self.pk.hex(),
                "x25519_secret": self.x_secret.hex(), "x25519_public": self.x_public.hex()}


alice, bob, carol = Device("alice-phone"), Device("bob-phone"), Device("carol-phone")
chat = b2b(b"chat with bob")
epoch_key = b2b(b"epoch key 1")
epoch = epoch_id(chat, epoch_key)
ephemeral_secret = b2b(b"ephemeral secret of the chat.key event")
ephemeral = x25519_pub(ephemeral_secret)
recipients = [(alice.pk, alice.x_public), (bob.pk, bob.x_public)]
all_wraps = wraps(epoch_key, chat, epoch, recipients, ephemeral_secret)

wrap_steps = []
for device in sorted([alice, bob], key=lambda d: d.pk):
    shared = x25519(ephemeral_secret, device.x_public)
    assert shared == x25519(device.x_secret, ephemeral)
    kw = wrap_key(shared, ephemeral, device.x_public)
    ad = wrap_ad(chat, epoch, device.pk)
    wrap_steps.append({"device": device.pk.hex(), "shared_hex": shared.hex(), "wrap_key_hex": kw.hex(), "ad_hex": ad.hex(),
                       "wrap_hex": (device.pk + aead(kw, ZERO_NONCE, ad, epoch_key)).hex()})
assert "".join(w["wrap_hex"] for w in wrap_steps) == all_wraps.hex()

sealed = []


def add_sealed(name, field, kind, obj, author, plaintext, nonce_label):
    nonce = b2b(nonce_label)[:24]
    out = seal(plaintext, epoch_key, chat, nonce, KIND[kind], obj, author.pk)
    sealed.append({"name": name, "field": field, "kind": kind, "kind_code": KIND[kind], "chat": chat.hex(), "object": obj.hex(),
                   "author": author.pk.hex(), "nonce_hex": nonce.hex(), "plaintext_hex": plaintext.hex(),
                   "ad_hex": sealed_ad(KIND[kind], chat, obj, author.pk).hex(), "sealed_hex": out.hex()})
    return out


image = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4
attachment_key = b2b(b"attachment key 1")
blob = aead(attachment_key, ZERO_NONCE, ATTACHMENT_CTX, image)
message_id = b2b(b"the id of a message.sent event")

add_sealed("chat title", "title", "chat.created", chat, alice, enc({"title": "Weekend ⛰"}), b"nonce title")
add_sealed("message with text", "body", "message.sent", chat, alice, enc({"text": "my bank PIN is 4321"}), b"nonce 1")
add_sealed("message with text and a picture id", "body", "message.sent", chat, bob,
           enc({"text": "look", "picture": b2b(b"picture 7")}), b"nonce 2")
with_attachment = add_sealed(
    "message with an attachment", "body", "message.sent", chat, alice,
    enc({"attachment": {"key": attachment_key, "mime": "image/jpeg", "size": len(image), "width": 640, "height": 480}}),
    b"nonce 3")
edit = add_sealed("edit", "body", "message.edited", message_id, alice, enc({"text": "my bank PIN is 1234"}), b"nonce 4")

# Negative cases: each must fail exactly as described.
negative = []
other_chat = b2b(b"another chat")


def wrap_of(ws, device):
    return next(ws[i + 32:i + 80] for i in range(0, len(ws), 80) if ws[i:i + 32] == device)


def fails(f):
    try:
        f()
    except Exception:  # nacl.exceptions.CryptoError
        return True
    return False


carol_kw = wrap_key(x25519(carol.x_secret, ephemeral), ephemeral, carol.x_public)
assert fails(lambda: aead_open(carol_kw, ZERO_NONCE, wrap_ad(chat, epoch, bob.pk), wrap_of(all_wraps, bob.pk)))
negative.append({"name": "a wrap opened with another device's key", "case": "wrong_device_key",
                 "device": bob.pk.hex(), "x25519_secret": carol.x_secret.hex(), "expect": "no key"})
moved = bytes.fromhex(sealed[1]["sealed_hex"])
assert fails(lambda: aead_open(epoch_key, moved[32:56], sealed_ad(KIND["message.sent"], other_chat, other_chat, alice.pk), moved[56:]))
negative.append({"name": "a sealed body moved to another chat", "case": "other_chat", "sealed": sealed[1]["name"],
                 "chat": other_chat.hex(), "expect": "does not open"})
wrong_key = b2b(b"not the key of that epoch")
mismatch_ephemeral = b2b(b"ephemeral of the mismatched event")
mismatch = wraps(wrong_key, chat, epoch, [(alice.pk, alice.x_public)], mismatch_ephemeral)
negative.append({"name": "a wrap whose key does not match its epoch id", "case": "epoch_mismatch", "device": alice.pk.hex(),
                 "x25519_secret": alice.x_secret.hex(), "epoch": epoch.hex(), "ephemeral": x25519_pub(mismatch_ephemeral).hex(),
                 "wraps_hex": mismatch.hex(), "expect": "no key: the AEAD opens but epoch_id(chat, K) differs"})

doc = {
    "description": "Chorus chat encryption v1 test vectors (Specs/encryption.md). Generated by "
                   "Tools/vectors/generate_encryption_vectors.py, an independent Python implementation.",
    "devices": [d.json() for d in (alice, bob, carol)],
    "chat": chat.hex(),
    "epoch_key_hex": epoch_key.hex(),
    "epoch": epoch.hex(),
    "chat_key": {
        "ephemeral_secret": ephemeral_secret.hex(),
        "ephemeral": ephemeral.hex(),
        "recipients": [alice.pk.hex(), bob.pk.hex()],
        "steps": wrap_steps,
        "wraps_hex": all_wraps.hex(),
        "payload_hex": enc({"epoch": epoch, "wraps": all_wraps, "ephemeral": ephemeral}).hex(),
    },
    "sealed": sealed,
    "attachment": {"key_hex": attachment_key.hex(), "image_hex": image.hex(), "blob_hex": blob.hex(),
                   "blob_hash": b2b(blob).hex(), "sealed_message_hex": with_attachment.hex()},
    "negative": negative,
}
print(json.dumps(doc, indent=1, ensure_ascii=False))
