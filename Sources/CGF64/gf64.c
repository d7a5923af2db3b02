#include "gf64.h"

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#include <immintrin.h>
#define CHORUS_GF64_CLMUL 1
#endif

// hi * x^64 + lo modulo the field polynomial: x^64 = x^4 + x^3 + x + 1,
// and the bits that shifts push past x^63 fold once more.
static inline uint64_t reduce(uint64_t hi, uint64_t lo) {
    uint64_t over = (hi >> 60) ^ (hi >> 61) ^ (hi >> 63);
    uint64_t h = hi ^ over;
    return lo ^ h ^ (h << 1) ^ (h << 3) ^ (h << 4);
}

static inline uint64_t mul_portable(uint64_t a, uint64_t b) {
    uint64_t lo = 0, hi = 0;
    for (int i = 0; i < 64; i++) {
        uint64_t mask = (uint64_t)0 - ((b >> i) & 1);
        lo ^= (a << i) & mask;
        if (i) hi ^= (a >> (64 - i)) & mask;
    }
    return reduce(hi, lo);
}

// The two loops a sketch spends its time in, for one multiply: power sums
// over many items, and one polynomial at many points.
#define CHORUS_GF64_LOOPS(ATTRIBUTES, NAME, MUL)                                                                          \
    ATTRIBUTES static void sums_##NAME(const uint64_t *tags, const uint64_t *values, uint64_t *powers, size_t n,        \
                                       uint64_t *out, size_t count) {                                                  \
        for (size_t i = 0; i < n; i++) {                                                                                \
            uint64_t p = powers[i], t = tags[i], v = values[i];                                                         \
            for (size_t k = 0; k < count; k++) {                                                                        \
                p = MUL(p, t);                                                                                          \
                out[k] ^= MUL(v, p);                                                                                    \
            }                                                                                                           \
            powers[i] = p;                                                                                              \
        }                                                                                                               \
    }                                                                                                                   \
    ATTRIBUTES static void evaluate_##NAME(const uint64_t *c, size_t degree, const uint64_t *points, size_t n,          \
                                           uint64_t *out) {                                                            \
        for (size_t i = 0; i < n; i++) {                                                                                \
            uint64_t acc = 0, x = points[i];                                                                            \
            for (size_t k = degree + 1; k-- > 0;) acc = MUL(acc, x) ^ c[k];                                             \
            out[i] = acc;                                                                                               \
        }                                                                                                               \
    }

CHORUS_GF64_LOOPS(, portable, mul_portable)

#ifdef CHORUS_GF64_CLMUL
__attribute__((target("pclmul,sse2"))) static inline uint64_t mul_clmul(uint64_t a, uint64_t b) {
    __m128i p = _mm_clmulepi64_si128(_mm_cvtsi64_si128((long long)a), _mm_cvtsi64_si128((long long)b), 0x00);
    uint64_t lo = (uint64_t)_mm_cvtsi128_si64(p);
    uint64_t hi = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(p, p));
    return reduce(hi, lo);
}

CHORUS_GF64_LOOPS(__attribute__((target("pclmul,sse2"))), clmul, mul_clmul)

static int has_clmul(void) { return __builtin_cpu_supports("pclmul"); }
#else
static int has_clmul(void) { return 0; }
#endif

uint64_t chorus_gf64_mul_portable(uint64_t a, uint64_t b) { return mul_portable(a, b); }

uint64_t chorus_gf64_mul(uint64_t a, uint64_t b) {
#ifdef CHORUS_GF64_CLMUL
    if (has_clmul()) return mul_clmul(a, b);
#endif
    return mul_portable(a, b);
}

void chorus_gf64_sums(const uint64_t *tags, const uint64_t *values, uint64_t *powers, size_t n, uint64_t *out, size_t count) {
#ifdef CHORUS_GF64_CLMUL
    if (has_clmul()) {
        sums_clmul(tags, values, powers, n, out, count);
        return;
    }
#endif
    sums_portable(tags, values, powers, n, out, count);
}

void chorus_gf64_evaluate(const uint64_t *c, size_t degree, const uint64_t *points, size_t n, uint64_t *out) {
#ifdef CHORUS_GF64_CLMUL
    if (has_clmul()) {
        evaluate_clmul(c, degree, points, n, out);
        return;
    }
#endif
    evaluate_portable(c, degree, points, n, out);
}
