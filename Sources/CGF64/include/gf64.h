// Arithmetic in GF(2^64) = GF(2)[x] / (x^64 + x^4 + x^3 + x + 1) for sketch
// reconciliation (Specs/sync.md §4.2.2): carry-less multiplication with the
// CPU's instruction where there is one (PCLMULQDQ on x86-64), a portable
// loop elsewhere, and the two loops that dominate a sketch's cost.
#ifndef CHORUS_GF64_H
#define CHORUS_GF64_H

#include <stddef.h>
#include <stdint.h>

/// a * b in the field.
uint64_t chorus_gf64_mul(uint64_t a, uint64_t b);

/// a * b by the portable loop alone (what a CPU without a carry-less
/// multiply runs; tests compare it with the instruction).
uint64_t chorus_gf64_mul_portable(uint64_t a, uint64_t b);

/// Adds (XOR) to out[0..<count] the next `count` power sums of n items:
/// for each item i, powers[i] holds tag_i^j for the last j done; each step
/// multiplies it by tags[i] and adds values[i] * tags[i]^(j+1) to the step's
/// sum. powers is updated in place.
void chorus_gf64_sums(const uint64_t *tags, const uint64_t *values, uint64_t *powers, size_t n, uint64_t *out, size_t count);

/// out[i] = the polynomial c[0] + c[1] x + ... + c[degree] x^degree at points[i].
void chorus_gf64_evaluate(const uint64_t *c, size_t degree, const uint64_t *points, size_t n, uint64_t *out);

#endif
