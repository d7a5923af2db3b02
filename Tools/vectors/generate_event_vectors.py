#!/usr/bin/env python3
"""Generates Specs/vectors/events.json from Specs/events.md alone.

This is a second, independent implementation of the Chorus event format
(Python, with the `cryptography` package for Ed25519, hashlib for BLAKE2b
and PyNaCl for the sealed bodies of Specs/encryption.md). The Swift test suite checks its output byte for byte, so the two
implementations and the spec must agree. Run from the repository root:

    python3 Tools/vectors/generate_event_vectors.py > Specs/vectors/events.json
"""
import json
import struct

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from chorus_vectors import b2b, enc, epoch_id, head, seal, wraps, x25519_pub

SIGNING_CONTEXT = b"chorus/event/v1\x00"
T0 = 1_700_000_000_000  # ms
NOW = T0 + 3_600_000
KINDS = {
    "device.added": 1, "device.removed": 2, "device.key": 3, "profile.set": 10, "picture.created": 20,
    "picture.captioned": 21, "picture.moved": 22, "picture.deleted": 23, "follow.added": 30,
    "follow.removed": 31, "like.added": 32, "like.removed": 33, "block.added": 34,
    "block.removed": 35, "chat.created": 40, "chat.member.added": 41, "chat.member.removed": 42,
    "message.sent": 43, "message.edited": 44, "message.deleted": 45, "chat.read": 46, "chat.key": 47,
    "coin.credited": 50, "coin.spent": 51, "coin.given": 52, "coin.rights.moved": 53,
    "slot.unlocked": 54, "slot.set": 55, "relays.set": 60,
}


def hlc(ms, logical=0):
    return ms << 16 | logical


class Key:
    def __init__(self, name):
        self.name = name
        self.seed = b2b(b"chorus test vector key " + name.encode())
        self.sk = Ed25519PrivateKey.from_private_bytes(self.seed)
        self.pk = self.sk.public_key().public_bytes_raw()

    def sign(self, msg):
        return self.sk.sign(msg)


def kind_code(kind):
    """A known kind's code, or N for "unknown.N" (a kind from a newer version)."""
    return KINDS[kind] if kind in KINDS else int(kind.removeprefix("unknown."))


def header_map(author, seq, prev, t, kind, obj, payload_bytes):
    return {0: 1, 1: author, 2: seq, 3: prev, 4: t, 5: kind_code(kind), 6: obj,
            7: b2b(payload_bytes), 8: len(payload_bytes)}


def envelope(header_bytes, sig, payload_bytes):
    return head(4, 3) + enc(header_bytes) + enc(sig) + (b"\xf6" if payload_bytes is None else enc(payload_bytes))


def event_id(header_bytes):
    return b2b(header_bytes)


class Built:
    def __init__(self, key, header_bytes, payload_bytes, keep_payload=True):
        self.header_bytes = header_bytes
        self.sig = key.sign(SIGNING_CONTEXT + header_bytes)
        self.payload_bytes = payload_bytes
        self.id = event_id(header_bytes)
        self.envelope = envelope(header_bytes, self.sig, payload_bytes if keep_payload else None)


def build(key, seq, prev, t, kind, obj, payload, keep_payload=True):
    pb = enc(payload)
    hb = enc(header_map(key.pk, seq, prev, t, kind, obj, pb))
    return Built(key, hb, pb, keep_payload)


user = Key("alice-user")
device = Key("alice-phone")
issuer = Key("store-issuer")
bob = Key("bob-user")
picture = b2b(b"picture 1")
chat = b2b(b"chat 1")
blob = b2b(b"jpeg bytes")
# Chat encryption (Specs/encryption.md): fixed secrets so the sealed bodies are exact.
device_x25519 = b2b(b"alice-phone x25519 secret")
epoch_key = b2b(b"chat 1 epoch key 1")


def sealed_body(content, nonce_label, kind="message.sent", obj=chat):
    return seal(enc(content), epoch_key, chat, b2b(nonce_label)[:24], KINDS[kind], obj, device.pk)


valid = []


def add_valid(name, key, seq, prev, t, kind, obj, payload, keep_payload=True, note=""):
    e = build(key, seq, prev, t, kind, obj, payload, keep_payload)
    valid.append({
        "name": name,
        "note": note,
        "author_seed": key.seed.hex(),
        "author": key.pk.hex(),
        "seq": seq,
        "prev": prev.hex() if prev else None,
        "hlc": t,
        "kind": kind,
        "kind_code": kind_code(kind),
        "object": obj.hex(),
        "payload_hex": e.payload_bytes.hex(),
        "payload_present": keep_payload,
        "payload_hash": b2b(e.payload_bytes).hex(),
        "header_hex": e.header_bytes.hex(),
        "signed_message_hex": (SIGNING_CONTEXT + e.header_bytes).hex(),
        "signature_hex": e.sig.hex(),
        "id": e.id.hex(),
        "envelope_hex": e.envelope.hex(),
    })
    return e


u1 = add_valid("device added by the user key", user, 1, None, hlc(T0), "device.added", device.pk,
               {"name": "alice-phone"}, note="first event of a feed: prev is null")
d1 = add_valid("profile name", device, 1, None, hlc(T0 + 5), "profile.set", user.pk,
               {"field": "name", "value": "Alice"})
d2 = add_valid("profile avatar", device, 2, d1.id, hlc(T0 + 5, 1), "profile.set", user.pk,
               {"field": "avatar", "value": picture}, note="same millisecond: logical counter 1")
d3 = add_valid("picture created", device, 3, d2.id, hlc(T0 + 1000), "picture.created", picture,
               {"blob": blob, "size": 48213, "mime": "image/jpeg", "caption": "Rooftops at dawn",
                "width": 1080, "height": 1350})
d4 = add_valid("chat message with text and picture", device, 4, d3.id, hlc(T0 + 2000), "message.sent", chat,
               {"body": sealed_body({"text": "Olá! 水", "picture": picture}, b"nonce d4")},
               note="body sealed (Specs/encryption.md §7) over the plaintext {text: \"Olá! 水\", picture}")
d5 = add_valid("unfollow naming the adds it saw", device, 5, d4.id, hlc(T0 + 3000), "follow.removed", bob.pk,
               {"seen": [b2b(b"follow add 1"), b2b(b"follow add 2")]})
d6 = add_valid("purged message", device, 6, d5.id, hlc(T0 + 4000), "message.sent", chat,
               {"body": sealed_body({"text": "deleted later"}, b"nonce d6")}, keep_payload=False,
               note="payload purged: the envelope carries null, the header still commits to the payload")
d7 = add_valid("profile field cleared", device, 7, d6.id, hlc(T0 + 300_000), "profile.set", user.pk,
               {"field": "city", "value": None})
d8 = add_valid("device encryption key", device, 8, d7.id, hlc(T0 + 300_001), "device.key", device.pk,
               {"key": x25519_pub(device_x25519)}, note="the device's X25519 public key (Specs/encryption.md §3)")
d9 = add_valid("chat key wrapped to one device", device, 9, d8.id, hlc(T0 + 300_002), "chat.key", chat,
               {"epoch": epoch_id(chat, epoch_key),
                "wraps": wraps(epoch_key, chat, epoch_id(chat, epoch_key),
                               [(device.pk, x25519_pub(device_x25519))], b2b(b"chat key ephemeral secret")),
                "ephemeral": x25519_pub(b2b(b"chat key ephemeral secret"))},
               note="Specs/encryption.md §5; encryption.json checks the wraps themselves")
d10 = add_valid("a kind this version does not know", device, 10, d9.id, hlc(T0 + 300_003), "unknown.99", user.pk,
                {"field": "name", "value": "Alice"},
                note="stored, verified and relayed, never folded (Specs/events.md §6.3); not a reason to refuse")
relay_home, relay_inbox = b2b(b"relay one device key"), b2b(b"relay two device key")
relay_list = {"keys": [relay_home, relay_inbox], "addresses": ["relay1.example.org:7800", "[2001:db8::7]:7801"],
              "roles": bytes([3, 2])}
d11 = add_valid("relay list", device, 11, d10.id, hlc(T0 + 300_004), "relays.set", user.pk, relay_list,
                note="Specs/events.md §6.2.29: the first relay home and inbox (3), the second inbox only (2)")
i1 = add_valid("coin credit by the issuer", issuer, 1, None, hlc(T0 + 10), "coin.credited", device.pk,
               {"user": user.pk, "amount": 500, "receipt": "GPA.3372-4411-0091-55201", "product": "coins_500"})

invalid = []


def add_invalid(name, env_bytes, error, prior=(), now=NOW, decode_error=True, note=""):
    invalid.append({
        "name": name,
        "note": note,
        "envelope_hex": env_bytes.hex(),
        "prior_hex": [p.envelope.hex() for p in prior],
        "now_ms": now,
        "error": error,
        "decode_error": decode_error,
    })


def signed_raw_header(key, header_bytes, payload_bytes):
    sig = key.sign(SIGNING_CONTEXT + header_bytes)
    return envelope(header_bytes, sig, payload_bytes)


def raw_header(pairs):
    """A header from (encoded key, encoded value) pairs, in the order given."""
    return head(5, len(pairs)) + b"".join(k + v for k, v in pairs)


p_name = enc({"field": "name", "value": "Alice"})
base_pairs = lambda seq_enc=None, hlc_enc=None, kind=10, payload=p_name, version=1: [
    (enc(0), enc(version)), (enc(1), enc(device.pk)), (enc(2), seq_enc or enc(1)), (enc(3), enc(None)),
    (enc(4), hlc_enc or enc(hlc(T0 + 5))), (enc(5), enc(kind)), (enc(6), enc(user.pk)),
    (enc(7), enc(b2b(payload))), (enc(8), enc(len(payload)))]

add_invalid("seq 1 encoded in two bytes", signed_raw_header(device, raw_header(base_pairs(seq_enc=b"\x18\x01")), p_name),
            "non_canonical_integer", note="validly signed, but 0x1801 is not the shortest form of 1")
pairs = base_pairs()
pairs[0], pairs[1] = pairs[1], pairs[0]
add_invalid("header keys out of order", signed_raw_header(device, raw_header(pairs), p_name), "unsorted_map_keys")
d1_parts = enc(d1.header_bytes) + enc(d1.sig) + enc(d1.payload_bytes)
add_invalid("indefinite-length envelope array", b"\x9f" + d1_parts + b"\xff", "indefinite_length")
add_invalid("trailing byte after the envelope", d1.envelope + b"\x00", "trailing_bytes")
add_invalid("hlc as a float", signed_raw_header(device, raw_header(base_pairs(hlc_enc=b"\xfb" + struct.pack(">d", float(hlc(T0))))), p_name),
            "float_not_allowed")
bad_sig = bytearray(d1.sig)
bad_sig[10] ^= 0x01
add_invalid("signature with one bit flipped", envelope(d1.header_bytes, bytes(bad_sig), d1.payload_bytes), "bad_signature",
            decode_error=False)
add_invalid("signature by another key", envelope(d1.header_bytes, bob.sign(SIGNING_CONTEXT + d1.header_bytes), d1.payload_bytes),
            "bad_signature", decode_error=False)
add_invalid("signature without the signing context", envelope(d1.header_bytes, device.sign(d1.header_bytes), d1.payload_bytes),
            "bad_signature", decode_error=False, note="the signed message must start with chorus/event/v1 and a zero byte")
tampered = enc({"field": "name", "value": "Alicf"})
add_invalid("payload changed after signing", envelope(d1.header_bytes, d1.sig, tampered), "payload_hash_mismatch")
add_invalid("payload longer than declared", envelope(d1.header_bytes, d1.sig, d1.payload_bytes + b"\x00"), "payload_length_mismatch")
add_invalid("profile.set without its payload", envelope(d1.header_bytes, d1.sig, None), "payload_missing",
            note="only picture.created, picture.captioned, message.sent and message.edited may be purged")
add_invalid("unknown kind with a non-canonical payload", signed_raw_header(device, raw_header(base_pairs(kind=99, payload=b"\x18\x01")), b"\x18\x01"),
            "non_canonical_integer", note="a kind's schema may be unknown, its payload must still be canonical CBOR")
add_invalid("format version 2", signed_raw_header(device, raw_header(base_pairs(version=2)), p_name), "unsupported_version")
add_invalid("seq 0", signed_raw_header(device, raw_header(base_pairs(seq_enc=enc(0))), p_name), "malformed_header")
add_invalid("impossible birthday", build(device, 1, None, hlc(T0 + 5), "profile.set", user.pk,
                                         {"field": "birthday", "value": "1990-02-30"}).envelope, "schema_violation")
add_invalid("unknown payload field", build(device, 1, None, hlc(T0 + 5), "profile.set", user.pk,
                                           {"field": "name", "value": "A", "mood": "happy"}).envelope, "schema_violation")
add_invalid("message without a body", build(device, 1, None, hlc(T0 + 5), "message.sent", chat, {}).envelope,
            "schema_violation")
add_invalid("message body in the clear", build(device, 1, None, hlc(T0 + 5), "message.sent", chat, {"text": "hello"}).envelope,
            "schema_violation", note="chat content is sealed; a text field is not part of message.sent")
add_invalid("message body shorter than a sealed value", build(device, 1, None, hlc(T0 + 5), "message.sent", chat,
                                                              {"body": bytes(71)}).envelope, "schema_violation")
two_wraps = wraps(epoch_key, chat, b2b(b"some epoch"), [(device.pk, x25519_pub(device_x25519)), (bob.pk, x25519_pub(b2b(b"bob x")))],
                  b2b(b"ephemeral 2"))
add_invalid("chat key with wraps out of device order", build(device, 1, None, hlc(T0 + 5), "chat.key", chat, {
    "epoch": b2b(b"some epoch"), "wraps": two_wraps[80:] + two_wraps[:80], "ephemeral": x25519_pub(b2b(b"ephemeral 2"))}).envelope,
            "schema_violation")
add_invalid("relay list whose lists differ in length", build(device, 1, None, hlc(T0 + 5), "relays.set", user.pk,
                                                             dict(relay_list, roles=bytes([3]))).envelope, "schema_violation")
add_invalid("relay address without a port", build(device, 1, None, hlc(T0 + 5), "relays.set", user.pk,
                                                  dict(relay_list, addresses=["relay1.example.org", "[2001:db8::7]:7801"])).envelope,
            "schema_violation")
add_invalid("relay with no role", build(device, 1, None, hlc(T0 + 5), "relays.set", user.pk,
                                        dict(relay_list, roles=bytes([3, 0]))).envelope, "schema_violation")
add_invalid("coin credit of zero", build(issuer, 1, None, hlc(T0 + 5), "coin.credited", device.pk,
                                         {"user": user.pk, "amount": 0, "receipt": "r"}).envelope, "schema_violation")
dup_payload = head(5, 2) + enc("field") + enc("name") + enc("field") + enc("bio")
add_invalid("payload with a duplicate key", signed_raw_header(device, raw_header(base_pairs(payload=dup_payload)), dup_payload),
            "duplicate_map_key")
bad_utf8 = head(5, 2) + enc("field") + enc("name") + enc("value") + b"\x62\xc3\x28"
add_invalid("payload text that is not UTF-8", signed_raw_header(device, raw_header(base_pairs(payload=bad_utf8)), bad_utf8),
            "invalid_utf8")
tagged = head(5, 2) + enc("field") + enc("name") + enc("value") + b"\xc0" + enc("Alice")
add_invalid("payload with a tag", signed_raw_header(device, raw_header(base_pairs(payload=tagged)), tagged), "tag_not_allowed")
big_object = [(k, enc(b"\x00" * 300) if k == enc(6) else v) for k, v in base_pairs()]
add_invalid("header over 256 bytes", signed_raw_header(device, raw_header(big_object), p_name), "header_too_large")
big = enc({"text": "x" * 65_530})
add_invalid("payload over 65536 bytes", signed_raw_header(device, enc(header_map(device.pk, 1, None, hlc(T0), "message.sent", chat, big)), big),
            "payload_too_large")
add_invalid("envelope of two items", head(4, 2) + enc(d1.header_bytes) + enc(d1.sig), "malformed_envelope")

# Feed checks: these need the events before them (prior_hex) and a clock (now_ms).
d2_wrong_prev = build(device, 2, b2b(b"not the previous event"), hlc(T0 + 6), "profile.set", user.pk,
                      {"field": "bio", "value": "hi"})
add_invalid("wrong previous id", d2_wrong_prev.envelope, "wrong_previous_id", prior=[d1], decode_error=False)
add_invalid("sequence gap", d3.envelope, "sequence_gap", prior=[d1], decode_error=False,
            note="seq 3 while the feed holds only seq 1; seq 2 must arrive first")
d2_fork = build(device, 2, d1.id, hlc(T0 + 7), "profile.set", user.pk, {"field": "bio", "value": "forked"})
add_invalid("fork", d2_fork.envelope, "fork", prior=[d1, d2], decode_error=False,
            note="a second, different, validly signed event at (author, 2); the node keeps it as evidence")
d2_same_time = build(device, 2, d1.id, d1_h := hlc(T0 + 5), "profile.set", user.pk, {"field": "bio", "value": "x"})
add_invalid("timestamp not after its predecessor", d2_same_time.envelope, "clock_not_increasing", prior=[d1], decode_error=False)
future = build(bob, 1, None, hlc(NOW + 61_000), "profile.set", bob.pk, {"field": "name", "value": "Bob"})
add_invalid("timestamp 61 s in the future", future.envelope, "timestamp_in_future", decode_error=False,
            note="allowed drift is 60000 ms; the same event is accepted once the clock reaches now_ms + 1000")

doc = {
    "description": "Chorus event format v1 test vectors (Specs/events.md). Generated by "
                   "Tools/vectors/generate_event_vectors.py, an independent Python implementation.",
    "signing_context_hex": SIGNING_CONTEXT.hex(),
    "drift_ms": 60_000,
    "keys": [{"name": k.name, "seed": k.seed.hex(), "public": k.pk.hex()} for k in (user, device, issuer, bob)],
    "valid": valid,
    "invalid": invalid,
}
print(json.dumps(doc, indent=1, ensure_ascii=False))
