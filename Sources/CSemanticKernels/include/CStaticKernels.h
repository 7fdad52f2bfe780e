// The static encoder's arithmetic (StaticEncoder): the sum of a document's int8 token rows, each
// times its row's scale, and the reduced-to-output map applied to several documents at once.
// Three variants, picked by `level`: 2 AVX-512F, 1 AVX2 with FMA, 0 portable C (x86-64 baseline
// or another CPU). See static.c.
#ifndef SEARCHLIGHT_STATIC_KERNELS_H
#define SEARCHLIGHT_STATIC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/// The best level this CPU runs: 2 (AVX-512F and FMA), 1 (AVX2 and FMA) or 0.
int sl_static_level(void);

/// sum[j] = Σ_t scales[ids[t]] · rows[ids[t] · dim + j] for j in 0 ..< dim (sum is overwritten).
/// Every id must index a row (the caller checks them). Levels 1 and 2 give the same bits
/// (one fused multiply-add per token and element, tokens in order); level 0 rounds the product.
void sl_static_sum(int level, const int8_t *rows, const float *scales, ptrdiff_t dim, const int32_t *ids,
                   ptrdiff_t count, float *sum);

/// y[r][j] = bias[j] + Σ_i x[r][i] · map[i][j] for r in 0 ..< count, j in 0 ..< outputs (x is
/// count × dim, map dim × outputs, y count × outputs, all row-major and dense). A row's result
/// does not depend on `count` or on the other rows (the same operations in the same order), so a
/// document embedded alone and in a batch gets the same bits. Levels 1 and 2 agree bit for bit.
void sl_static_project(int level, const float *x, ptrdiff_t count, ptrdiff_t dim, const float *map, const float *bias,
                       ptrdiff_t outputs, float *y);

/// Scales v to unit length (unchanged when its norm is below 1e-12): the squares summed in 16
/// lanes (lane l takes every element j with j mod 16 = l, in order), the lanes then added in a
/// fixed tree, so that levels 2 and 0 give the same bits (no fused operations in either).
void sl_static_normalize(int level, float *v, ptrdiff_t n);

/// int8 codes of v, returning the scale: scale = max|v| / 127 over the finite values (1 when
/// that is 0), codes[j] = round-half-even(clamp(v[j] / scale, ±127)), 0 for a value that is not
/// finite. The same bits on every CPU (exact operations only).
/// The CPU's best level (AVX-512F: 16 lanes at a time).
float sl_quantize_i8(const float *v, ptrdiff_t n, int8_t *codes);

/// The same at `level` (2 AVX-512F, else portable C): the same bits at every level.
float sl_quantize_i8_level(int level, const float *v, ptrdiff_t n, int8_t *codes);

/// Asks for the cache line at p ahead of its use (the word cache's entries: `WordQueue`).
static inline void sl_prefetch(const void *p) { __builtin_prefetch(p); }

#endif
