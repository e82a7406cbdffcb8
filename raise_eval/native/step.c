/* Elementwise passes of a Boltzmann machine's annealing step, each in one pass over memory where eager PyTorch
 * makes several: the native half of raise_eval.models.sampling (Bernoulli samples from random bytes) and of
 * LayeredBoltzmannMachine.log_ratio_to (the weight update's sum of log1p terms). Portable C: the compiler
 * vectorizes the loops for the CPU at hand.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Bernoulli samples by random bytes, as raise_eval.models.sampling._sample_lazy_bytes computes them, bit for bit:
 * -d = b - 256 p (one rounding, 256 p being exact), x = 1 where -d < 0; entries with -1 < -d < 0, or -d = -0., found
 * as that function finds them (the value's bits read as a signed integer below those of -1.), are ties, which the
 * caller resolves with fresh uniforms: their indices (ascending) and d go to tie_index and tie_d (room for n).
 * out may be p. Returns the number of ties. */
#define BERNOULLI(T, I, NAME)                                                                                     \
    int64_t NAME(int64_t n, const T *p, const uint8_t *bytes, T *out, int64_t *tie_index, T *tie_d) {            \
        const T minus_one = (T)-1.0;                                                                              \
        I threshold;                                                                                              \
        memcpy(&threshold, &minus_one, sizeof threshold);                                                         \
        int64_t ties = 0;                                                                                         \
        T neg_d[256]; /* a block's -d, kept: out may be p */                                                      \
        for (int64_t start = 0; start < n; start += 256) {                                                        \
            const int64_t size = n - start < 256 ? n - start : 256;                                               \
            int any = 0;                                                                                          \
            for (int64_t i = 0; i < size; i++) {                                                                  \
                neg_d[i] = (T)bytes[start + i] - (T)256.0 * p[start + i];                                         \
                I bits;                                                                                           \
                memcpy(&bits, &neg_d[i], sizeof bits);                                                            \
                any |= bits < threshold;                                                                          \
            }                                                                                                     \
            for (int64_t i = 0; i < size; i++) out[start + i] = neg_d[i] < (T)0.0 ? (T)1.0 : (T)0.0;             \
            if (!any) continue; /* ties are rare (1 in 256): look for them only in blocks that hold one */        \
            for (int64_t i = 0; i < size; i++) {                                                                  \
                I bits;                                                                                           \
                memcpy(&bits, &neg_d[i], sizeof bits);                                                            \
                if (bits < threshold) {                                                                           \
                    tie_index[ties] = start + i;                                                                  \
                    tie_d[ties++] = -neg_d[i];                                                                    \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
        return ties;                                                                                              \
    }

BERNOULLI(float, int32_t, bernoulli_bytes_float32)
BERNOULLI(double, int64_t, bernoulli_bytes_float64)

#define LANES 8
#define BLOCK 256 /* factors per logarithm: in [e^-2, e^2], a block's product stays within double's range */

/* For rows [row_start, row_end) of a summed-out layer of n units: out[r] = -sum_j log(1 + expm1(m_j) p_j) with
 * m_j = base_j - ds u_j (the negated change of unit j's logit between two temperatures: base = b_from - b_to), all in
 * double; expm1 by its Taylor series of the given degree (Horner), which the caller chose for the largest |m| it
 * guarantees (within a quarter epsilon of e^m - 1); the log of each block's product of factors. */
#define LOG1P_EXPM1(T, NAME)                                                                                      \
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
