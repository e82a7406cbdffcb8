/* Products x A of 0./1. inputs x with float32 weights A, exactly in integers on the AMX tiles of Intel CPUs: the
 * native half of the "amx" route of raise_eval.models.boltzmann.products (see `IntegerWeights` there).
 *
 * Each column j of A is held as integers q_ij = round(A_ij / s_j), s_j a power of two with |q_ij| <= 2^30, written
 * in four balanced base-256 digits (int8, most significant first): q = ((d0 256 + d1) 256 + d2) 256 + d3. With x in
 * {0, 1} as uint8, one tile instruction (TDPBUSD) adds 16 x 16 x 64 products of a digit into int32 sums, exactly;
 * the four sums of an output combine exactly in an int64 (|sum| <= K 2^31), which a double holds exactly for
 * K < 2^22 inputs; times s_j (a power of two, exact), then alpha and the bias in double (two roundings at 2^-53), it
 * is rounded to float32. So the result is the exact product of x and the integer weights up to those roundings,
 * whatever the order of the work: the same bits for any split of the rows between calls or threads.
 *
 * Layout of `packed` (from Python): for each block of 16 columns nb and digit d, a panel of kpad / 4 rows of 64
 * bytes, row kk holding columns nb 16 + n (n < 16) at bytes 4 n + r for inputs k = 4 kk + r (TDPBUSD's B layout).
 * kpad (a multiple of 64) pads the inputs with zero rows, the last block's columns with zero columns.
 */
#include "export.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define ROWS 32 /* rows per block: two A tiles of 16 */

/* 1 where the CPU has AMX tiles with int8 products and Linux grants this process their state, else 0. */
RAISE_EVAL_EXPORT int amx_int8_ready(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((d >> 24) & 1u) || !((d >> 25) & 1u)) return 0; /* AMX-TILE, AMX-INT8 */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Rows [row_start, row_end) of out (rows x cols, float32, contiguous) = bias + alpha sum_t xs[t] A_t, or the bare sum
 * where bias is NULL. xs[t]: float32 rows of widths[t] values 0. or 1., contiguous; the inputs of the terms follow
 * each other in the packed weights. stage: room for the rows' inputs as uint8, kpad bytes per row and the rows
 * rounded up to a multiple of 32, 64-byte aligned (kept by the caller between calls: fresh pages would fault). */
RAISE_EVAL_EXPORT void amx_binary_product(int64_t nterms, const float *const *xs, const int64_t *widths,
                                          const int8_t *packed, int64_t kpad, int64_t nblocks, const double *scales,
                                          int64_t cols, const float *bias, double alpha, float *out,
                                          int64_t row_start, int64_t row_end, uint8_t *stage) {
    const int64_t nrows = row_end - row_start, nrpad = (nrows + ROWS - 1) / ROWS * ROWS;
    if (nrows <= 0) return;
    /* the inputs of these rows as uint8, kpad per row, zero-padded to a whole block of rows */
    for (int64_t r = 0; r < nrpad; r++) {
        uint8_t *dst = stage + r * kpad, *end = dst + kpad;
        if (r < nrows) {
            for (int64_t t = 0; t < nterms; t++) {
                const float *src = xs[t] + (row_start + r) * widths[t];
                for (int64_t i = 0; i < widths[t]; i++) dst[i] = (uint8_t)src[i];
                dst += widths[t];
            }
        }
        memset(dst, 0, (size_t)(end - dst));
    }
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int i = 0; i < 8; i++) {
        config.rows[i] = 16;
        config.colsb[i] = 64;
    }
    _tile_loadconfig(&config);
    int32_t sums[4][ROWS][16]; /* per digit: the int32 sums of a block of rows and 16 columns */
    const int64_t steps = kpad / 64, panel = (kpad / 4) * 64;
    /* a column block's digits (4 x kpad x 16 bytes) stay in the L1 cache while every block of rows passes them */
    for (int64_t nb = 0; nb < nblocks; nb++) {
        const int64_t c0 = nb * 16, nc = cols - c0 < 16 ? cols - c0 : 16;
        for (int64_t r0 = 0; r0 < nrows; r0 += ROWS) {
            const uint8_t *a = stage + r0 * kpad;
            const int64_t nr = nrows - r0 < ROWS ? nrows - r0 : ROWS;
            for (int pair = 0; pair < 2; pair++) { /* digits 2 pair and 2 pair + 1 */
                const int8_t *b0 = packed + (nb * 4 + 2 * pair) * panel, *b1 = b0 + panel;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t s = 0; s < steps; s++) {
                    _tile_loadd(4, a + s * 64, kpad);
                    _tile_loadd(5, a + 16 * kpad + s * 64, kpad);
                    _tile_loadd(6, b0 + s * 1024, 64);
                    _tile_loadd(7, b1 + s * 1024, 64);
                    _tile_dpbusd(0, 4, 6);
                    _tile_dpbusd(1, 4, 7);
                    _tile_dpbusd(2, 5, 6);
                    _tile_dpbusd(3, 5, 7);
                }
                _tile_stored(0, &sums[2 * pair][0][0], 64);
                _tile_stored(1, &sums[2 * pair + 1][0][0], 64);
                _tile_stored(2, &sums[2 * pair][16][0], 64);
                _tile_stored(3, &sums[2 * pair + 1][16][0], 64);
            }
            for (int64_t r = 0; r < nr; r++) {
                float *o = out + (row_start + r0 + r) * cols + c0;
                for (int64_t j = 0; j < nc; j++) {
                    const int64_t whole =
                        (((int64_t)sums[0][r][j] * 256 + sums[1][r][j]) * 256 + sums[2][r][j]) * 256 + sums[3][r][j];
                    const double value = (double)whole * scales[c0 + j];
                    o[j] = bias != NULL ? (float)(bias[c0 + j] + alpha * value) : (float)value;
                }
            }
        }
    }
    _tile_release();
}
