/* The sweep for one element type T, included by dbn_sweep.c once per type; NAME(part) names its functions. */

/* The moments of row x (n units) recomputed from the logits of the layer below: a = x W^T + b (wt: W^T, (n, m)). */
static void NAME(_recompute)(T *p, T *q, const T *x, int64_t n, int64_t m, const T *wt, const T *bias) {
    for (int64_t i = 0; i < m; i++) p[i] = bias[i];
    for (int64_t j = 0; j < n; j++) {
        if (x[j] == 0) continue;
        const T *w = wt + j * m;
        for (int64_t i = 0; i < m; i++) p[i] += w[i];
    }
    for (int64_t i = 0; i < m; i++) {
        T a = p[i];
        p[i] = (T)1 / ((T)1 + exp(-a));
        q[i] = (T)1 / ((T)1 + exp(a));
    }
}

/* Whether a moment of the row is below `tiny`. */
static int NAME(_below)(const T *p, const T *q, int64_t m, T tiny) {
    int found = 0;
    for (int64_t i = 0; i < m; i++) found |= (p[i] < tiny) | (q[i] < tiny);
    return found;
}

/* sum_i log(q_i + p_i e_i) over one row, by the groups of the plan. */
static double NAME(_log_ratio)(const T *q, const T *p, const T *e, const int64_t *group_ends,
                               const uint8_t *take_log, int64_t n_groups) {
    double total = 0.0, carried = 1.0;
    int64_t begin = 0;
    for (int64_t g = 0; g < n_groups; g++) {
        int64_t end = group_ends[g];
        /* four independent products of LANES lanes: each hides the others' latency. Every partial product is
         * over a subset of the group, so within the type's range. */
        T a0[LANES], a1[LANES], a2[LANES], a3[LANES];
        for (int k = 0; k < LANES; k++) a0[k] = a1[k] = a2[k] = a3[k] = 1;
        int64_t i = begin;
        for (; i + 4 * LANES <= end; i += 4 * LANES) {
            for (int k = 0; k < LANES; k++) a0[k] *= q[i + k] + p[i + k] * e[i + k];
            for (int k = LANES; k < 2 * LANES; k++) a1[k - LANES] *= q[i + k] + p[i + k] * e[i + k];
            for (int k = 2 * LANES; k < 3 * LANES; k++) a2[k - 2 * LANES] *= q[i + k] + p[i + k] * e[i + k];
            for (int k = 3 * LANES; k < 4 * LANES; k++) a3[k - 3 * LANES] *= q[i + k] + p[i + k] * e[i + k];
        }
        for (; i + LANES <= end; i += LANES)
            for (int k = 0; k < LANES; k++) a0[k] *= q[i + k] + p[i + k] * e[i + k];
        for (int k = 0; i + k < end; k++) a1[k] *= q[i + k] + p[i + k] * e[i + k];
        for (int k = 0; k < LANES; k++) a0[k] *= a1[k] * (a2[k] * a3[k]);
        for (int width = LANES / 2; width >= 1; width /= 2)
            for (int k = 0; k < width; k++) a0[k] *= a0[k + width];
        carried *= (double)a0[0];
        if (take_log[g]) {
            total += log(carried);
            carried = 1.0;
        }
        begin = end;
    }
    return total;
}

/* Sweeps rows [row_begin, row_end) of x (rows, n) in place; lin (rows, n): the units' logits without the softplus
 * terms; thr (rows, n): the thresholds; p, q (rows, m): the moments of the layer below, moved where a unit flips;
 * e (n, 2, m): e^w and e^-w per unit; the plan's group_ends and take_log (n_groups); fragile (rows,) or NULL: per
 * row, whether a moment is below tiny; wt (n, m) = W^T and bias (m,): the layer below's logits, for fragile rows. */
RAISE_EVAL_EXPORT
void NAME()(int64_t row_begin, int64_t row_end, int64_t n, int64_t m, T *x, const T *lin, const double *thr, T *p,
            T *q, const T *e, double beta, const int64_t *group_ends, const uint8_t *take_log, int64_t n_groups,
            int64_t tile, double tiny_value, uint8_t *fragile, const T *wt, const T *bias) {
    const T tiny = (T)tiny_value;
    for (int64_t t0 = row_begin; t0 < row_end; t0 += tile) {
        int64_t t1 = t0 + tile < row_end ? t0 + tile : row_end;
        for (int64_t j = 0; j < n; j++) {
            for (int64_t r = t0; r < t1; r++) {
                T *xr = x + r * n, *pr = p + r * m, *qr = q + r * m;
                int on = xr[j] != 0;
                const T *er = e + (2 * j + on) * m;
                double log_ratio = NAME(_log_ratio)(qr, pr, er, group_ends, take_log, n_groups);
                double logit = (double)lin[r * n + j] - beta * (on ? -log_ratio : log_ratio);
                int now = thr[r * n + j] < logit;
                if (now == on) continue;
                xr[j] = (T)now;
                for (int64_t i = 0; i < m; i++) {
                    T moved = pr[i] * er[i];
                    T factor = qr[i] + moved;
                    pr[i] = moved / factor;
                    qr[i] = qr[i] / factor;
                }
                if (fragile != 0 && (fragile[r] || NAME(_below)(pr, qr, m, tiny))) {
                    NAME(_recompute)(pr, qr, xr, n, m, wt, bias);
                    fragile[r] = (uint8_t)NAME(_below)(pr, qr, m, tiny);
                }
            }
        }
    }
}
