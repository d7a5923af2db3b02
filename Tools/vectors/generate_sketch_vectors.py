#!/usr/bin/env python3
"""Generates Specs/vectors/sketch.json from Specs/sync.md section 4.2.2 alone.

A second, independent implementation of sketch reconciliation (Python,
hashlib for BLAKE2b, integers for GF(2^64)). It does not decode sketches:
it knows both sides' feeds, so it computes the difference a decoder must
find from the sets themselves, and the actions that follow from it. The
Swift test suite rebuilds every message from the feeds, decodes the
sketches and checks every byte and every decision. Run from the repository
root:

    python3 Tools/vectors/generate_sketch_vectors.py > Specs/vectors/sketch.json
"""
import json
import struct

from chorus_vectors import b2b, enc

MODULUS = (1 << 64) | 0x1B  # x^64 + x^4 + x^3 + x + 1
MAX_CAPACITY = 1024
INFO, SKETCH, RESULT = 20, 21, 22
MORE, FOUND, GIVE_UP = 0, 1, 2
MASK64 = (1 << 64) - 1


def gf_mul(a, b):
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a >> 64:
            a ^= MODULUS
    return r


def u64(n):
    return struct.pack(">Q", n)


class Side:
    """A node's feeds: author -> list of event ids, seq 1 first."""

    def __init__(self, feeds, nonce, device):
        self.feeds = dict(feeds)
        self.nonce = nonce
        self.device = device

    def heads(self):
        return [(a, len(ids), ids[-1]) for a, ids in sorted(self.feeds.items())]

    def count(self):
        return len(self.feeds)

    def total(self):
        return sum(len(ids) for ids in self.feeds.values()) & MASK64

    def set_hash(self):
        data = b"chorus/sketch/set/v1\x00" + b"".join(a + u64(s) + h for a, s, h in self.heads())
        return b2b(data)[:16]

    def info(self):
        return enc([INFO, self.count(), self.total(), self.set_hash(), self.nonce])


def tag(salt, author):
    return int.from_bytes(b2b(salt + author)[:8], "big")


def value(seq, head):
    return seq << 24 | int.from_bytes(head[:3], "big")


def check(salt, x, v):
    return int.from_bytes(b2b(b"chorus/sketch/check/v1\x00" + salt + u64(x) + u64(v))[:8], "big")


def items(side, salt):
    return {tag(salt, a): (a, value(s, h)) for a, s, h in side.heads()}


def syndromes(its, first, last):
    out = []
    for j in range(first, last + 1):
        s = 0
        for x, (_, v) in its.items():
            p = 1
            e = j
            base = x
            while e:  # x^j by squaring
                if e & 1:
                    p = gf_mul(p, base)
                base = gf_mul(base, base)
                e >>= 1
            s ^= gf_mul(v, p)
        out.append(s)
    return out


def checksum(its, salt):
    return sum(check(salt, x, v) for x, (_, v) in its.items()) & MASK64


def first_capacity(a, b):
    e = abs(a.count() - b.count()) + abs(a.total() - b.total())
    e = min(e, a.count() + b.count(), MASK64)
    return min(MAX_CAPACITY, max(8, e + (e + 15) // 16 + 4))


def scenario(name, a, b):
    out = {"name": name, "a": feeds_json(a), "b": feeds_json(b),
           "aNonce": a.nonce.hex(), "bNonce": b.nonce.hex(), "aDevice": a.device.hex(), "bDevice": b.device.hex(),
           "aInfo": a.info().hex(), "bInfo": b.info().hex()}
    if a.count() == b.count() and a.set_hash() == b.set_hash():
        out["outcome"] = "identical"
        return out
    if abs(a.count() - b.count()) > MAX_CAPACITY:
        out["outcome"] = "skipped"
        return out
    # The sketcher: the smaller total, then the smaller device key.
    sk, de = (a, b) if (a.total(), a.device) < (b.total(), b.device) else (b, a)
    out["sketcher"] = "a" if sk is a else "b"
    salt = b2b(b"chorus/sketch/salt/v1\x00" + sk.nonce + de.nonce)[:16]
    out["salt"] = salt.hex()
    sk_items, de_items = items(sk, salt), items(de, salt)
    ck = checksum(sk_items, salt)
    # The difference: every tag whose values differ (0 for a side without the feed).
    diff = []
    for x in sorted(set(sk_items) | set(de_items)):
        vs = sk_items.get(x, (None, 0))[1]
        vd = de_items.get(x, (None, 0))[1]
        if vs != vd:
            diff.append((x, vs ^ vd, vs, vd))
    rounds = []
    t_prev, t = 0, first_capacity(a, b)
    while True:
        syn = syndromes(sk_items, 2 * t_prev + 1, 2 * t)
        msg = enc([SKETCH, ck, b"".join(u64(s) for s in syn)])
        decodable = len(diff) < t or (t == MAX_CAPACITY and len(diff) <= t)
        if decodable:
            reply = None  # filled below
        elif t == MAX_CAPACITY:
            reply = enc([RESULT, GIVE_UP, [], 0])
        else:
            reply = enc([RESULT, MORE, [], 0])
        rounds.append({"capacity": t, "sketch": msg.hex(), "reply": reply.hex() if reply else None})
        if decodable or t == MAX_CAPACITY:
            break
        t_prev, t = t, min(MAX_CAPACITY, 2 * t)
    if not decodable:
        out["outcome"] = "gaveUp"
        out["rounds"] = rounds
        return out
    # The decoder's decisions (Specs/sync.md section 4.2.2, "Acting on the difference").
    asks, pushes, wants = [], [], []
    for x, e, vs, vd in diff:
        if vd == 0:
            asks.append(x)
            continue
        author = de_items[x][0]
        ids = de.feeds[author]
        sd = len(ids)
        ss, hs = vs >> 24, vs & 0xFFFFFF
        if ss == 0:
            pushes.append([author, 1, sd])
        elif ss < sd:
            if int.from_bytes(ids[ss - 1][:3], "big") == hs:
                pushes.append([author, ss + 1, sd])
            else:
                pushes.append([author, ss, ss])
        elif ss == sd:
            pushes.append([author, sd, sd])
            wants.append([author, ss])
        else:
            wants.append([author, ss])
    pushes.sort()
    wants.sort()
    rounds[-1]["reply"] = enc([RESULT, FOUND, asks, sum(p[2] - p[1] + 1 for p in pushes)]).hex()
    out["outcome"] = "found"
    out["rounds"] = rounds
    out["difference"] = [[u64(x).hex(), u64(e).hex(), u64(vs).hex(), u64(vd).hex()] for x, e, vs, vd in diff]
    out["asks"] = [sk_items[x][0].hex() for x in asks]
    out["pushes"] = [[p[0].hex(), p[1], p[2]] for p in pushes]
    out["wants"] = [[w[0].hex(), w[1]] for w in wants]
    return out


def feeds_json(side):
    return [[a.hex(), [i.hex() for i in ids]] for a, ids in sorted(side.feeds.items())]


def chain(author, length, fork=b""):
    return [b2b(b"sketch vector event " + fork + author + u64(i)) for i in range(1, length + 1)]


def author(i):
    return b2b(b"sketch vector author " + struct.pack(">I", i))


def base_feeds(n):
    return {author(i): chain(author(i), i % 9 + 1) for i in range(n)}


def main():
    nonce = lambda s: b2b(b"sketch vector nonce " + s)[:16]
    dev = lambda s: b2b(b"sketch vector device " + s)
    base = base_feeds(60)
    # B: lacks the last event of three feeds, lacks one whole feed, holds a
    # feed A lacks, is one event ahead on another, holds another event at
    # A's height of one feed (a fork at the same height) and one below it.
    b = {k: list(v) for k, v in base.items()}
    keys = sorted(b)
    for k in keys[0:3]:
        b[k] = b[k][:-1] if len(b[k]) > 1 else b[k]
    del b[keys[3]]
    b[author(1000)] = chain(author(1000), 4)
    b[keys[4]] = b[keys[4]] + chain(keys[4], len(b[keys[4]]) + 1)[-1:]
    b[keys[5]] = b[keys[5]][:-1] + [b2b(b"forked head " + keys[5])]
    k6 = [k for k in keys[6:] if len(base[k]) >= 4][0]
    b[k6] = b[k6][:2] + [b2b(b"forked below " + k6)]  # A holds a longer, different chain
    # Many differences with equal totals: the first capacity is too small.
    c = {k: list(v) for k, v in base.items()}
    for k in keys[10:22]:
        c[k] = c[k][:-1] + [b2b(b"other head " + k)]
    cases = [
        scenario("identical", Side(base, nonce(b"a1"), dev(b"a")), Side(base, nonce(b"b1"), dev(b"b"))),
        scenario("differences", Side(base, nonce(b"a2"), dev(b"a")), Side(b, nonce(b"b2"), dev(b"b"))),
        scenario("second round", Side(base, nonce(b"a3"), dev(b"a")), Side(c, nonce(b"b3"), dev(b"b"))),
    ]
    field = []
    x = 0x0123456789ABCDEF
    y = 0xFEDCBA9876543210
    for _ in range(6):
        field.append([u64(x).hex(), u64(y).hex(), u64(gf_mul(x, y)).hex()])
        x, y = gf_mul(x, x) ^ y, gf_mul(y, 0x1B) ^ 0x8000000000000001
    out = {
        "description": "Chorus sketch reconciliation (Specs/sync.md section 4.2.2): two nodes' feeds "
        "[author, [event ids, seq 1 first]]; each side's sketchInfo; the sketcher's sketch messages and the "
        "decoder's sketchResult replies, round by round; the difference the decoder finds [tag, e, sketcher's "
        "value, decoder's value] (8-byte big-endian, ascending by tag), and what it decides: the authors it asks "
        "the sketcher to announce, the ranges it pushes and the heights it requests. field: [a, b, a*b] in "
        "GF(2^64). Generated by Tools/vectors/generate_sketch_vectors.py.",
        "field": field,
        "scenarios": cases,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
