/* Systematic-scan Gibbs sweep over the units of one directed hidden layer of a DBN, with the softplus terms of the
 * layer below computed exactly for every unit and chain: the native route of
 * raise_eval.paths.posterior.DBNPosteriorPath (see its docstring for the path and the kernel).
 *
 * For each row r (a chain) and unit j in order: with p = sigmoid(a), q = sigmoid(-a) the moments of the layer
 * below and e = e^(s w_j) (s = +1 where x_j = 0, a flip would turn it on; -1 where x_j = 1), the unit's logit is
 *     lin_j - beta s sum_i log(q_i + p_i e_i),
 * each factor q_i + p_i e_i a sum of two non-negative terms within e^(+-|w_ij|). The factors are multiplied in
 * independent lanes over groups of inputs planned in Python (`_native_plan`: no product over a subset of a group
 * leaves the type's range), a group's product is carried in a double, and the double's log is taken where the
 * plan says (the carried magnitude stays below 0.9 log(DBL_MAX)). x_j becomes 1{thr_j < logit}, thr_j the logit of
 * a uniform. A flip moves the row's moments multiplicatively: p' = p e / F and q' = q / F with F = q + p e. In a
 * fragile layer (logits that can take a moment below the smallest normal number) a row whose moments are or were
 * that small is recomputed from its logits a = x W^T + b: a multiplicative update cannot bring an underflowed
 * value back.
 *
 * Rows are independent, each swept with its own thresholds, so the result does not depend on how rows are split
 * between calls or threads. Rows go in tiles whose moments stay in the L1 cache while every unit visits them.
 */
#include "export.h"

#include <math.h>
#include <stdint.h>

#define LANES 16 /* _NATIVE_LANES in paths/posterior/sweeps.py: group ends are multiples of it (but the last) */

#define T float
#define NAME(part) dbn_sweep_float32##part
#include "dbn_sweep_body.h"
#undef T
#undef NAME

#define T double
#define NAME(part) dbn_sweep_float64##part
#include "dbn_sweep_body.h"
#undef T
#undef NAME
