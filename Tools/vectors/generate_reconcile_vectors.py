#!/usr/bin/env python3
"""Generates Specs/vectors/reconcile.json from Specs/sync.md section 4.2.1 alone.

A second, independent implementation of the feed-head reconciliation
(Python, hashlib for BLAKE2b). Two nodes' feed heads are given; the vector
lists, round by round, the exact `reconcile` message each side sends and the
authors each side announces (`have`) after receiving the other's round. The
Swift test suite replays both sides and checks every byte. Run from the
repository root:

    python3 Tools/vectors/generate_reconcile_vectors.py > Specs/vectors/reconcile.json
"""
import json
import struct

from chorus_vectors import b2b, enc

LEAF_TARGET = 4
MAX_LEAF_ITEMS = 1024
MAX_BUCKETS = 1024
RECONCILE_TYPE = 19


def digest(author, seq, head_id):
    h = b2b(b"chorus/reconcile/v1\x00" + author + struct.pack(">Q", seq) + head_id)
    return int.from_bytes(h[:8], "big")


def nibbles(author, k):
    out = []
    for i in range(k):
        b = author[i // 2]
        out.append(b >> 4 if i % 2 == 0 else b & 0x0F)
    return out


class Side:
    def __init__(self, heads):
        self.heads = sorted(heads)  # (author, seq, head)
        self.digests = [digest(*h) for h in self.heads]
        self.depth = None
        self.sent = None

    def bucket(self, prefix):
        return [i for i, h in enumerate(self.heads) if nibbles(h[0], len(prefix)) == list(prefix)]

    def fingerprint(self, prefix):
        x = 0
        for i in self.bucket(prefix):
            x ^= self.digests[i]
        return x.to_bytes(8, "big")

    def round(self, splits, leaves):
        s = [[bytes(p), b"".join(self.fingerprint(list(p) + [c]) for c in range(16))] for p in splits]
        l = []
        for p in leaves:
            members = self.bucket(p)
            if len(members) > MAX_LEAF_ITEMS:
                l.append([bytes(p), None])
            else:
                l.append([bytes(p), b"".join(d.to_bytes(8, "big") for d in sorted(self.digests[i] for i in members))])
        self.sent = (splits, leaves, s, l)
        return enc([RECONCILE_TYPE, len(self.heads), s, l])

    def first(self):
        return self.round([[]], [])

    def receive(self, peer_count, peer_splits, peer_leaves):
        splits, leaves, my_s, my_l = self.sent
        assert [bytes(p) for p in splits] == [p for p, _ in peer_splits]
        assert [bytes(p) for p in leaves] == [p for p, _ in peer_leaves]
        if self.depth is None:
            n = max(len(self.heads), peer_count)
            d = 1
            while LEAF_TARGET * 16 ** d < n and d < 64:
                d += 1
            self.depth = d
        announce = []
        for (p, mine), (_, theirs) in zip(my_l, peer_leaves):
            members = self.bucket(list(p))
            if mine is not None and theirs is not None:
                known = {int.from_bytes(theirs[i:i + 8], "big") for i in range(0, len(theirs), 8)}
                announce += [i for i in members if self.digests[i] not in known]
            else:
                announce += members
        next_splits, next_leaves = [], []
        for (p, mine), (_, theirs) in zip(my_s, peer_splits):
            for c in range(16):
                if mine[8 * c:8 * c + 8] != theirs[8 * c:8 * c + 8]:
                    child = list(p) + [c]
                    (next_leaves if len(child) >= self.depth else next_splits).append(child)
        if not next_splits and not next_leaves:
            return announce, None
        if len(next_splits) + len(next_leaves) > MAX_BUCKETS:
            for p in next_splits + next_leaves:
                announce += self.bucket(p)
            return announce, None
        return announce, self.round(next_splits, next_leaves)


def feeds(count, salt):
    out = []
    for i in range(count):
        author = b2b(b"reconcile vector author " + struct.pack(">I", i))
        seq = i % 7 + 1
        out.append((author, seq, b2b(b"head " + salt + struct.pack(">IQ", i, seq))))
    return out


def scenario(name, a_heads, b_heads):
    a, b = Side(a_heads), Side(b_heads)
    rounds = []
    ma, mb = a.first(), b.first()
    while True:
        sa, sb = a.sent, b.sent
        entry = {"a": ma.hex(), "b": mb.hex()}
        ann_a, ma = a.receive(len(b.heads), sb[2], sb[3])
        ann_b, mb = b.receive(len(a.heads), sa[2], sa[3])
        entry["aAnnounces"] = [a.heads[i][0].hex() for i in ann_a]
        entry["bAnnounces"] = [b.heads[i][0].hex() for i in ann_b]
        rounds.append(entry)
        assert (ma is None) == (mb is None)
        if ma is None:
            break

    def heads_json(hs):
        return [[h[0].hex(), h[1], h[2].hex()] for h in sorted(hs)]

    return {"name": name, "a": heads_json(a_heads), "b": heads_json(b_heads), "rounds": rounds}


def main():
    base = feeds(300, b"")
    b_heads = list(base)
    # B lacks two feeds, is behind on one, holds another head at the same
    # height (fork evidence), and has two feeds A lacks.
    del b_heads[77]
    del b_heads[5]
    author, seq, _ = base[100]
    b_heads[b_heads.index(base[100])] = (author, seq + 3, b2b(b"head moved " + author))
    author, seq, _ = base[200]
    b_heads[b_heads.index(base[200])] = (author, seq, b2b(b"head forked " + author))
    b_heads += feeds(302, b"")[300:]
    small_a = feeds(3, b"")
    out = {
        "description": "Chorus feed-head reconciliation (Specs/sync.md section 4.2.1): two nodes' heads "
        "[author, seq, head id]; per round, the exact reconcile message each side sends and the authors "
        "each announces (have) after receiving the other's round, in order. Generated by "
        "Tools/vectors/generate_reconcile_vectors.py.",
        "digest": {
            "author": base[0][0].hex(), "seq": base[0][1], "head": base[0][2].hex(),
            "digest": digest(*base[0]).to_bytes(8, "big").hex(),
        },
        "scenarios": [
            scenario("identical", base, list(base)),
            scenario("differences", base, b_heads),
            scenario("small", small_a, []),
        ],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
