/* Elementwise passes of a Boltzmann machine's annealing step, each in one pass over memory where eager PyTorch
 * makes several: the native half of raise_eval.models.sampling (Bernoulli samples from Philox's random bytes, of
 * probabilities or of logits) and of LayeredBoltzmannMachine.log_ratio_to (the weight update's sum of log1p terms,
 * with the probabilities of the next draw). Portable C (the AVX-512 intrinsics of the Philox rounds have a scalar
 * twin with the same results): the compiler vectorizes the loops for the CPU at hand.
 */
#include "export.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* sigmoid(x) = 1 / (1 + e^-x) in float32, branch-free so that the loops around it vectorize (with
 * -fno-trapping-math): e^t for t = -x clamped to [-87, 88] as 2^n e^r, n = round(t / log 2), r = t - n log 2 in two
 * parts (|r| <= 0.347, the first product exact), e^r by its Taylor series to degree 7 (truncation below 0.05 units in
 * the last place), 2^n put into the exponent bits. Relative error within 1.3 2^-23 (tests/native measures it), as
 * torch.sigmoid's. Beyond the clamp the result is 1 (x >= 87), a probability below 1e-38 that the samplers' 2^-32
 * resolution cannot tell from sigmoid(x) (-104 < x < -88), or exactly 0 where sigmoid(x) rounds to 0 in float32
 * (x < -103.972, as torch.sigmoid); a NaN stays a NaN (its sample is 0, as on the PyTorch path). */
static inline float sigmoid_float(float x) {
    float t = -x;
    t = t < -87.0f ? -87.0f : t;
    t = t > 88.0f ? 88.0f : t;
    const float shifter = 12582912.0f; /* 1.5 2^23: adding it rounds to an integer */
    const float n = (t * 1.44269504f + shifter) - shifter;
    const float r = (t - n * 0.693359375f) - n * -2.12194440e-4f;
    float e = 1.0f / 5040.0f;
    e = e * r + 1.0f / 720.0f;
    e = e * r + 1.0f / 120.0f;
    e = e * r + 1.0f / 24.0f;
    e = e * r + 1.0f / 6.0f;
    e = e * r + 0.5f;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    /* n in [-126, 127] but for a NaN x, whose exponent is then taken as -126 (a float-to-int conversion of a NaN
     * is undefined): e stays a NaN either way */
    float whole = n > -126.0f ? n : -126.0f;
    whole = whole < 127.0f ? whole : 127.0f;
    const uint32_t bits = (uint32_t)((int32_t)whole + 127) << 23; /* a normal power of two */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -103.972f ? 0.0f : 1.0f / (1.0f + e * scale);
}

#define LANES 8
#define BLOCK 256 /* factors per logarithm: in [e^-2, e^2], a block's product stays within double's range */

/* For rows [row_start, row_end) of a summed-out layer of n units: out[r] = -sum_j log(1 + expm1(m_j) p_j) with
 * m_j = base_j - ds u_j (the negated change of unit j's logit between two temperatures: base = b_from - b_to), all in
 * double; expm1 by its Taylor series of the given degree (Horner), which the caller chose for the largest |m| it
 * guarantees: within a quarter of the model dtype's epsilon of e^m - 1 (so a float32 model's terms carry a truncation
 * of up to 2^-26 relative, always of one sign, as on the PyTorch path); the log of each block's product of factors. */
#define LOG1P_EXPM1(T, NAME)                                                                                      \
    RAISE_EVAL_EXPORT                                                                                             \
    void NAME(int64_t row_start, int64_t row_end, int64_t n, const T *u, const T *probs, const T *base, double ds, \
              int64_t degree, double *out) {                                                                      \
        double inverse[32];                                                                                       \
        for (int64_t k = 1; k <= degree && k < 32; k++) inverse[k] = 1.0 / (double)k;                            \
        double m[BLOCK], q[BLOCK];                                                                                \
        for (int64_t r = row_start; r < row_end; r++) {                                                           \
            const T *ur = u + r * n, *pr = probs + r * n;                                                         \
            double total = 0.0;                                                                                   \
            for (int64_t start = 0; start < n; start += BLOCK) {                                                  \
                const int64_t size = n - start < BLOCK ? n - start : BLOCK;                                       \
                for (int64_t i = 0; i < size; i++) {                                                              \
                    m[i] = (double)base[start + i] - ds * (double)ur[start + i];                                  \
                    q[i] = 1.0;                                                                                   \
                }                                                                                                 \
                for (int64_t k = degree; k >= 2; k--) { /* Horner, one pass over the block per degree */          \
                    const double c = inverse[k];                                                                  \
                    for (int64_t i = 0; i < size; i++) q[i] = 1.0 + m[i] * c * q[i];                              \
                }                                                                                                 \
                for (int64_t i = 0; i < size; i++) q[i] = 1.0 + (m[i] * q[i]) * (double)pr[start + i];            \
                double lane[LANES];                                                                               \
                for (int l = 0; l < LANES; l++) lane[l] = 1.0;                                                    \
                int64_t i = 0;                                                                                    \
                for (; i + LANES <= size; i += LANES)                                                             \
                    for (int l = 0; l < LANES; l++) lane[l] *= q[i + l];                                          \
                double product = 1.0;                                                                             \
                for (int l = 0; l < LANES; l++) product *= lane[l];                                               \
                for (; i < size; i++) product *= q[i];                                                            \
                total += log(product);                                                                            \
            }                                                                                                     \
            out[r] = -total;                                                                                      \
        }                                                                                                         \
    }

LOG1P_EXPM1(float, log1p_expm1_float32)
LOG1P_EXPM1(double, log1p_expm1_float64)

/* log1p_expm1_float32 with the probabilities computed on the way, in the same pass: probs[r, j] = sigmoid(z'_rj)
 * (sigmoid_float) of z' = b_to_j + s_to u_rj (formed in double, then rounded to float32). */
RAISE_EVAL_EXPORT
void weight_update_float32(int64_t row_start, int64_t row_end, int64_t n, const float *u, const float *b_to,
                           double s_to, const float *base, double ds, int64_t degree, float *probs, double *out) {
    double inverse[32];
    for (int64_t k = 1; k <= degree && k < 32; k++) inverse[k] = 1.0 / (double)k;
    double m[BLOCK], q[BLOCK], p[BLOCK];
    for (int64_t r = row_start; r < row_end; r++) {
        const float *ur = u + r * n;
        float *pr = probs + r * n;
        double total = 0.0;
        for (int64_t start = 0; start < n; start += BLOCK) {
            const int64_t size = n - start < BLOCK ? n - start : BLOCK;
            for (int64_t i = 0; i < size; i++) {
                const double ui = (double)ur[start + i];
                const float pi = sigmoid_float((float)((double)b_to[start + i] + s_to * ui));
                pr[start + i] = pi;
                p[i] = (double)pi;
                m[i] = (double)base[start + i] - ds * ui;
                q[i] = 1.0;
            }
            for (int64_t k = degree; k >= 2; k--) {
                const double c = inverse[k];
                for (int64_t i = 0; i < size; i++) q[i] = 1.0 + m[i] * c * q[i];
            }
            for (int64_t i = 0; i < size; i++) q[i] = 1.0 + (m[i] * q[i]) * p[i];
            double lane[LANES];
            for (int l = 0; l < LANES; l++) lane[l] = 1.0;
            int64_t i = 0;
            for (; i + LANES <= size; i += LANES)
                for (int l = 0; l < LANES; l++) lane[l] *= q[i + l];
            double product = 1.0;
            for (int l = 0; l < LANES; l++) product *= lane[l];
            for (; i < size; i++) product *= q[i];
            total += log(product);
        }
        out[r] = -total;
    }
}

/* ------------------------------------------------------------------------------------------------ Philox draws */
/* Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a counter-
 * based generator, output = a keyed bijection of the counter, so that any element's random bits are computed where
 * they are needed, in any order and any split between threads. tests/native checks Random123's known answers. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define WAYS 16 /* counters run side by side (the loops over them vectorize) */

RAISE_EVAL_EXPORT void philox4x32_10(const uint32_t *counter, const uint32_t *key, uint32_t *out) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3], k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        const uint64_t a = (uint64_t)PHILOX_M0 * c0, b = (uint64_t)PHILOX_M1 * c2;
        const uint32_t n0 = (uint32_t)(b >> 32) ^ c1 ^ k0, n2 = (uint32_t)(a >> 32) ^ c3 ^ k1;
        c0 = n0, c1 = (uint32_t)b, c2 = n2, c3 = (uint32_t)a;
        k0 += PHILOX_W0, k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* Philox for the counters (first + l, 0, 0, 0), l < WAYS: the 256 random bytes of a block of elements, laid out as
 * the four output words of the WAYS counters, word by word: element e of the block takes byte e mod 4 of output word
 * e / 64 of counter first + (e mod 64) / 4 (the layout of the vector registers: no transposition). Integer operations
 * only, so the vector path (AVX-512) and the scalar one give the same bytes. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline void mulhilo16(__m512i c, __m512i m, __m512i *hi, __m512i *lo) {
    const __m512i even = _mm512_mul_epu32(c, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}
static inline void philox_bytes(uint64_t first, uint32_t key0, uint32_t key1, uint8_t *bytes) {
    uint32_t lo32[WAYS], hi32[WAYS];
    for (int l = 0; l < WAYS; l++) lo32[l] = (uint32_t)(first + l), hi32[l] = (uint32_t)((first + l) >> 32);
    __m512i c0 = _mm512_loadu_si512(lo32), c1 = _mm512_loadu_si512(hi32), c2 = _mm512_setzero_si512(),
            c3 = _mm512_setzero_si512();
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    uint32_t k0 = key0, k1 = key1;
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo16(c0, m0, &hi0, &lo0);
        mulhilo16(c2, m1, &hi1, &lo1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c1 = lo1, c3 = lo0;
        k0 += PHILOX_W0, k1 += PHILOX_W1;
    }
    _mm512_storeu_si512(bytes, c0);
    _mm512_storeu_si512(bytes + 64, c1);
    _mm512_storeu_si512(bytes + 128, c2);
    _mm512_storeu_si512(bytes + 192, c3);
}
#else
static inline void philox_bytes(uint64_t first, uint32_t key0, uint32_t key1, uint8_t *bytes) {
    uint32_t words[4][WAYS];
    for (int l = 0; l < WAYS; l++) {
        const uint32_t counter[4] = {(uint32_t)(first + l), (uint32_t)((first + l) >> 32), 0u, 0u},
                       key[2] = {key0, key1};
        uint32_t out[4];
        philox4x32_10(counter, key, out);
        for (int w = 0; w < 4; w++) words[w][l] = out[w];
    }
    memcpy(bytes, words, sizeof words); /* little-endian words, word by word */
}
#endif

/* A uniform on [0, 1) for element i's tie: counter (i mod 2^32, i / 2^32, 1, 0) (no byte block has a third word of 1);
 * on float32's grid of 2^-24 from the first word, on float64's of 2^-53 from the first two. */
static inline double philox_tie_uniform(uint64_t i, uint32_t key0, uint32_t key1, int float64) {
    const uint32_t counter[4] = {(uint32_t)i, (uint32_t)(i >> 32), 1u, 0u}, key[2] = {key0, key1};
    uint32_t out[4];
    philox4x32_10(counter, key, out);
    if (!float64) return (double)(out[0] >> 8) * 0x1p-24;
    return (double)((((uint64_t)out[0] << 32) | out[1]) >> 11) * 0x1p-53;
}

/* Bernoulli samples as raise_eval.models.sampling draws them (x = 1{(b + u') / 256 < p}: a random byte b, and where
 * it ties with 256 p a uniform u'), with b and u' from Philox keyed by (key0, key1): elements [0, n) of this call are the
 * elements first + [0, n) of the whole draw (first a multiple of 256: the caller's duty), so that any split gives the
 * same samples. No
 * ties are handed back: each is resolved here. from_logits: p = sigmoid_float(x) (float32). out may be x. */
#define BERNOULLI_PHILOX(T, I, NAME, LOGITS, FLOAT64)                                                            \
    RAISE_EVAL_EXPORT                                                                                           \
    void NAME(int64_t n, const T *x, T *out, uint32_t key0, uint32_t key1, int64_t first) {                    \
        const T minus_one = (T)-1.0;                                                                            \
        I threshold;                                                                                            \
        memcpy(&threshold, &minus_one, sizeof threshold);                                                       \
        uint8_t bytes[256];                                                                                     \
        T neg_d[256];                                                                                           \
        for (int64_t start = 0; start < n; start += 256) {                                                      \
            const int64_t size = n - start < 256 ? n - start : 256;                                             \
            philox_bytes((uint64_t)(first + start) / 16, key0, key1, bytes);                                    \
            int any = 0;                                                                                        \
            for (int64_t i = 0; i < size; i++) {                                                                \
                const T p = LOGITS ? (T)sigmoid_float((float)x[start + i]) : x[start + i];                      \
                neg_d[i] = (T)bytes[i] - (T)256.0 * p;                                                          \
                I bits;                                                                                         \
                memcpy(&bits, &neg_d[i], sizeof bits);                                                          \
                any |= bits < threshold;                                                                        \
            }                                                                                                   \
            for (int64_t i = 0; i < size; i++) out[start + i] = neg_d[i] < (T)0.0 ? (T)1.0 : (T)0.0;           \
            if (!any) continue;                                                                                 \
            for (int64_t i = 0; i < size; i++) {                                                                \
                I bits;                                                                                         \
                memcpy(&bits, &neg_d[i], sizeof bits);                                                          \
                if (bits < threshold) {                                                                         \
                    const double u = philox_tie_uniform((uint64_t)(first + start + i), key0, key1, FLOAT64);    \
                    out[start + i] = (T)u < -neg_d[i] ? (T)1.0 : (T)0.0;                                        \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

BERNOULLI_PHILOX(float, int32_t, bernoulli_philox_float32, 0, 0)
BERNOULLI_PHILOX(double, int64_t, bernoulli_philox_float64, 0, 1)
BERNOULLI_PHILOX(float, int32_t, bernoulli_philox_logits_float32, 1, 0)
