/* The elementwise work of an HMC leapfrog step on an energy model (raise_eval.kernels.energy_hmc), in one pass over
 * the chains' positions and momenta where eager PyTorch makes ten or more: the momentum update with the geometric
 * path's gradient (beta times the energy's, plus the diagonal Gaussian base's, computed inline), the position update,
 * the reflection at a box's walls, and at a trajectory's ends the sums that the acceptance test needs (the momenta's
 * squares, the base's squared standard scores), in double.
 *
 * Each arithmetic step is the one the PyTorch route takes, in the same order and dtype, and contractions into fused
 * multiply-adds are off: the two routes give the same numbers (the sums in double may differ in their last bits, as
 * they are added in another order). Rows are chains: x, p and grad are (rows, dim), contiguous.
 */
#include "export.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 8

/* The passes run in place (x_in == x_out, p_in == p_out), each element read before it is written at the same index:
 * no dependence between iterations, which the compiler is told (it would otherwise take a scalar loop there). */
#if defined(__clang__)
#define IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define IVDEP _Pragma("GCC ivdep")
#else
#define IVDEP
#endif

/* sum over the row of (double)v^2 (the kinetic energy's sum), in LANES independent sums that vectorize */
#define SQUARE_SUM(T, NAME)                                                                                      \
    static double NAME(const T *v, int64_t dim) {                                                                \
        double part[LANES] = {0};                                                                                \
        int64_t d = 0;                                                                                           \
        for (; d + LANES <= dim; d += LANES)                                                                     \
            for (int k = 0; k < LANES; k++) part[k] += (double)v[d + k] * (double)v[d + k];                      \
        double total = 0;                                                                                        \
        for (; d < dim; d++) total += (double)v[d] * (double)v[d];                                               \
        for (int k = 0; k < LANES; k++) total += part[k];                                                        \
        return total;                                                                                            \
    }

/* sum over the row of ((x - mean) * inverse_std)^2 in double (the base's log-density less its constant; a product
 * where GaussianBase.log_prob divides: the same to the last bits or so, in a fraction of the time), and the number
 * of coordinates outside [low, high] (unbounded: +-inf, none) */
#define BASE_SUM(T, NAME)                                                                                        \
    static double NAME(const T *x, int64_t dim, const double *mean, const double *inverse_std, double low,      \
                       double high, int64_t *outside) {                                                          \
        double part[LANES] = {0};                                                                                \
        int64_t d = 0, out = 0;                                                                                  \
        for (; d + LANES <= dim; d += LANES)                                                                     \
            for (int k = 0; k < LANES; k++) {                                                                    \
                const double v = (double)x[d + k], z = (v - mean[d + k]) * inverse_std[d + k];                   \
                part[k] += z * z;                                                                                \
                out += (v < low) | (v > high);                                                                   \
            }                                                                                                    \
        double total = 0;                                                                                        \
        for (; d < dim; d++) {                                                                                   \
            const double v = (double)x[d], z = (v - mean[d]) * inverse_std[d];                                   \
            total += z * z;                                                                                      \
            out += (v < low) | (v > high);                                                                       \
        }                                                                                                        \
        for (int k = 0; k < LANES; k++) total += part[k];                                                        \
        *outside = out;                                                                                          \
        return total;                                                                                            \
    }

/* After the pass has mirrored each coordinate of a row once at the wall it crossed (x = inside - over, the momentum
 * negated where over != 0: energy_hmc.reflect's arithmetic) and left the ones whose overshoot was at least the box's
 * width where they landed (outside [low, high], the momentum as it was), those are folded by the parity of the widths
 * crossed (_fold's arithmetic, bit for bit). Rare: a step that crosses the whole box (the pilot's largest step sizes).
 * A NaN position is left as it is; an infinite one becomes NaN, as in _fold. */
#define FOLD_WIDE_ROW(T, NAME)                                                                                   \
    static void NAME(T *x, T *p, int64_t dim, T low, T high, double box_width) {                                 \
        const T width = (T)box_width;                                                                            \
        for (int64_t d = 0; d < dim; d++) {                                                                      \
            const T v = x[d];                                                                                    \
            if (!(v < low || v > high)) continue; /* mirrored once, or NaN: done */                              \
            const T t = (v - low) / width;                                                                       \
            const T n = (T)floor((double)t);                                                                     \
            const T r = t - n;                                                                                   \
            const T parity = n - (T)floor((double)(n / 2)) * 2;                                                  \
            const int odd = parity == 1;                                                                         \
            x[d] = low + width * (odd ? 1 - r : r);                                                              \
            p[d] = odd ? -p[d] : p[d];                                                                           \
        }                                                                                                        \
    }

/* For rows [row_start, row_end):
 *   p_out = p_in + (half * move) * ((mean - x_in) * base_weight + beta * grad)   with move = eps[r] * scale[d];
 *   if flags & 1 (a position update follows): x_out = x_in + move * p_out, then (flags & 2) reflected into
 *   [low, high];
 * x_in may be x_out and p_in p_out (in place). Where given (non-null): square_in[r] = sum p_in^2 and square_out[r] =
 * sum p_out^2 (double); base_sum[r] = sum ((x_in - mean64) * inverse_std64)^2 and base_outside[r] = x_in's
 * coordinates outside [low, high]. eps_stride: 0 (one step size) or 1 (one per row). */
/* p_in + (half * move) * force at coordinate d of the row, move = eps * scale and force = the path's gradient
 * (mean - x) * base_weight + beta * grad, each product in T as the PyTorch route rounds it */
#define MOMENTUM(d) (pi[d] + (half_t * (step * scale[d])) * ((mean[d] - xi[d]) * base_weight[d] + beta_t * g[d]))

#define LEAPFROG(T, NAME, SQUARES, BASE, REFLECT)                                                                \
    SQUARE_SUM(T, SQUARES)                                                                                       \
    BASE_SUM(T, BASE)                                                                                            \
    FOLD_WIDE_ROW(T, REFLECT)                                                                                    \
    RAISE_EVAL_EXPORT                                                                                            \
    void NAME(int64_t row_start, int64_t row_end, int64_t dim, const T *x_in, T *x_out, const T *p_in, T *p_out, \
              const T *grad, const T *mean, const T *base_weight, const T *eps, int64_t eps_stride,              \
              const T *scale, double beta, double half, int64_t flags, double low, double high,                  \
              const double *mean64, const double *inverse_std64, double *square_in, double *square_out,                 \
              double *base_sum, int64_t *base_outside) {                                                         \
        const T beta_t = (T)beta, half_t = (T)half, low_t = (T)low, high_t = (T)high;                            \
        const T width = (T)(high - low);                                                                         \
        const int moving = (flags & 1) != 0, bounded = (flags & 2) != 0;                                         \
        for (int64_t r = row_start; r < row_end; r++) {                                                          \
            const int64_t at = r * dim;                                                                          \
            const T *xi = x_in + at, *pi = p_in + at, *g = grad + at;                                            \
            T *xo = x_out + at, *po = p_out + at;                                                                \
            const T step = eps[r * eps_stride];                                                                  \
            if (square_in) square_in[r] = SQUARES(pi, dim);                                                      \
            if (base_sum) base_sum[r] = BASE(xi, dim, mean64, inverse_std64, low, high, base_outside + r);     \
            if (!moving) {                                                                                       \
                IVDEP                                                                                            \
                for (int64_t d = 0; d < dim; d++) po[d] = MOMENTUM(d);                                           \
            } else if (!bounded) {                                                                               \
                IVDEP                                                                                            \
                for (int64_t d = 0; d < dim; d++) {                                                              \
                    const T p = MOMENTUM(d);                                                                     \
                    po[d] = p;                                                                                   \
                    xo[d] = xi[d] + (step * scale[d]) * p;                                                       \
                }                                                                                                \
            } else { /* the move and one mirror at the wall crossed, in one pass (most rows cross somewhere) */  \
                int32_t wide = 0; /* counted in 32-bit lanes, as wide as float32's */                            \
                IVDEP                                                                                            \
                for (int64_t d = 0; d < dim; d++) {                                                              \
                    const T p = MOMENTUM(d);                                                                     \
                    const T v = xi[d] + (step * scale[d]) * p;                                                   \
                    const T inside = v < low_t ? low_t : (v > high_t ? high_t : v);                              \
                    const T over = v - inside, size = over < 0 ? -over : over;                                   \
                    /* (written so that the loop vectorizes; a NaN position is neither mirrored nor wide, and */ \
                    /* keeps its momentum, as a fold leaves it) */                                               \
                    const int wide_d = size >= width;                                                            \
                    wide += wide_d ? 1 : 0;                                                                      \
                    xo[d] = wide_d ? v : inside - over;                                                          \
                    po[d] = (size > 0 && !wide_d) ? -p : p;                                                      \
                }                                                                                                \
                if (wide) REFLECT(xo, po, dim, low_t, high_t, high - low);                                       \
            }                                                                                                    \
            if (square_out) square_out[r] = SQUARES(po, dim);                                                    \
        }                                                                                                        \
    }

LEAPFROG(float, energy_leapfrog_float32, square_sum_float32, base_sum_float32, reflect_row_float32)
LEAPFROG(double, energy_leapfrog_float64, square_sum_float64, base_sum_float64, reflect_row_float64)

/* out[r] = new[r] where accept[r], else old[r], rows of `row_bytes` bytes (out may be new: only the rejected rows are
 * copied then) */
RAISE_EVAL_EXPORT
void select_rows(int64_t rows, int64_t row_bytes, const uint8_t *accept, const char *new_rows, const char *old_rows,
                 char *out) {
    for (int64_t r = 0; r < rows; r++) {
        const char *from = accept[r] ? new_rows : old_rows;
        if (from != out) memcpy(out + r * row_bytes, from + r * row_bytes, (size_t)row_bytes);
    }
}

/* The end of an HMC transition, per chain r, every chain inside the box (the native route's acceptance test):
 *   log_accept = beta (log_f_new - log_f_old) + (1 - beta)(base_start - base_end) / 2 + (square_in - square_out) / 2
 * in double, in the order of energy_leapfrog._log_accept's short form; non_finite[r] = 1 where it is NaN or +inf
 * (the proposal then rejected, as -inf); accepted where log_u < log_accept; the chosen rows of x (new, in place) and
 * grad (out) copied as select_rows copies them; log_f_out the chosen log f and acceptance min(1, exp(log_accept)).
 * One call where PyTorch takes about twenty small operations on (rows,) tensors. */
RAISE_EVAL_EXPORT
void hmc_finish(int64_t rows, int64_t row_bytes, double beta, const double *log_f_new, const double *log_f_old,
                const double *base_start, const double *base_end, const double *square_in, const double *square_out,
                const double *log_u, char *x, const char *x_old, char *grad, const char *grad_new,
                const char *grad_old, double *log_f_out, double *acceptance, double *non_finite) {
    const double base_weight = 0.5 * (1 - beta);
    for (int64_t r = 0; r < rows; r++) {
        double ends = (base_start[r] - base_end[r]) * base_weight;
        ends += (square_in[r] - square_out[r]) * 0.5;
        double log_accept = (log_f_new[r] - log_f_old[r]) * beta + ends;
        const int bad = isnan(log_accept) || log_accept == INFINITY;
        non_finite[r] = bad ? 1.0 : 0.0;
        if (bad) log_accept = -INFINITY;
        const int accept = log_u[r] < log_accept;
        acceptance[r] = exp(log_accept < 0 ? log_accept : 0.0);
        log_f_out[r] = accept ? log_f_new[r] : log_f_old[r];
        const int64_t at = r * row_bytes;
        if (!accept) memcpy(x + at, x_old + at, (size_t)row_bytes);
        memcpy(grad + at, (accept ? grad_new : grad_old) + at, (size_t)row_bytes);
    }
}
