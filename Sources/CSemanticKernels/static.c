// Why C: Swift builds for the x86-64 baseline, so StaticEncoder's loops were SSE at best; the row
// sum converted int8 to float one lane group at a time and waited on each row of the 3.9 MB
// table (a cache miss per row: the next rows' addresses were not known to the CPU early), and the
// 128 × 384 map (192 KB) streamed through the cache once per document. Here the sum prefetches
// the rows a few tokens ahead and keeps its 128 accumulators in registers, and the map is applied
// to a batch of documents at once, each of its rows read once for up to six documents.
#include "CStaticKernels.h"

#include <math.h>

// Prefetch distance in tokens: far enough for a row to arrive from memory (~100 ns) while the
// tokens before it are summed (~10 ns each).
#define AHEAD 8

static void sum_portable(const int8_t *rows, const float *scales, ptrdiff_t dim, const int32_t *ids, ptrdiff_t count,
                         float *sum) {
    for (ptrdiff_t j = 0; j < dim; j++) sum[j] = 0;
    for (ptrdiff_t t = 0; t < count; t++) {
        if (t + AHEAD < count) __builtin_prefetch(rows + (ptrdiff_t)ids[t + AHEAD] * dim);
        const int8_t *row = rows + (ptrdiff_t)ids[t] * dim;
        const float s = scales[ids[t]];
        for (ptrdiff_t j = 0; j < dim; j++) sum[j] += s * (float)row[j];
    }
}

static void project_portable(const float *x, ptrdiff_t count, ptrdiff_t dim, const float *map, const float *bias,
                             ptrdiff_t outputs, float *y) {
    for (ptrdiff_t r = 0; r < count; r++) {
        float *yr = y + r * outputs;
        for (ptrdiff_t j = 0; j < outputs; j++) yr[j] = bias[j];
        for (ptrdiff_t i = 0; i < dim; i++) {
            const float a = x[r * dim + i];
            const float *m = map + i * outputs;
            for (ptrdiff_t j = 0; j < outputs; j++) yr[j] += a * m[j];
        }
    }
}

// 16 lanes of squares, added as ((l0+l8)+(l4+l12)) … : the tree _mm512_reduce_add_ps would use
// is not promised, so both levels spell it out.
static float lanes_total(const float lanes[16]) {
    float h[8], q[4], e[2];
    for (int k = 0; k < 8; k++) h[k] = lanes[k] + lanes[k + 8];
    for (int k = 0; k < 4; k++) q[k] = h[k] + h[k + 4];
    for (int k = 0; k < 2; k++) e[k] = q[k] + q[k + 2];
    return e[0] + e[1];
}

static void normalize_portable(float *v, ptrdiff_t n) {
    float lanes[16] = {0};
    for (ptrdiff_t j = 0; j < n; j++) {
        const float square = v[j] * v[j];  // a separate statement: never fused with the add
        lanes[j % 16] = lanes[j % 16] + square;
    }
    const float norm = sqrtf(lanes_total(lanes));
    const float scale = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
    for (ptrdiff_t j = 0; j < n; j++) v[j] *= scale;
}

static float quantize_portable(const float *v, ptrdiff_t n, int8_t *codes) {
    float top = 0;
    for (ptrdiff_t j = 0; j < n; j++) {
        const float a = fabsf(v[j]);
        if (a <= 3.4028235e38f && a > top) top = a;  // finite values only (NaN fails both tests)
    }
    const float scale = top > 0 ? top / 127.0f : 1.0f;
    const float inverse = 1.0f / scale;
    const float magic = 12582912.0f;  // 1.5 · 2^23: x + magic - magic rounds x half to even
    for (ptrdiff_t j = 0; j < n; j++) {
        float x = v[j] * inverse;
        x = fabsf(v[j]) <= 3.4028235e38f ? x : 0.0f;
        x = x < -127.0f ? -127.0f : (x > 127.0f ? 127.0f : x);
        codes[j] = (int8_t)(int)((x + magic) - magic);
    }
    return scale;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,fma")))
#define AVX2 __attribute__((target("avx2,fma")))

int sl_static_level(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma")) return 0;
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
    return 0;
}

static inline __attribute__((always_inline)) void prefetch_row(const int8_t *row, ptrdiff_t dim) {
    for (ptrdiff_t k = 0; k < dim; k += 64) _mm_prefetch((const char *)(row + k), _MM_HINT_T0);
}

// ---- AVX-512: V vectors of 16 columns (V a constant after inlining), the last one masked.

static inline AVX512 __attribute__((always_inline)) void sum512(const int V, const int8_t *rows, const float *scales,
                                                               ptrdiff_t dim, ptrdiff_t col, __mmask16 last,
                                                               const int32_t *ids, ptrdiff_t count, float *sum) {
    __m512 acc[8];
    for (int v = 0; v < V; v++) acc[v] = _mm512_setzero_ps();
    for (ptrdiff_t t = 0; t < count; t++) {
        if (col == 0 && t + AHEAD < count) prefetch_row(rows + (ptrdiff_t)ids[t + AHEAD] * dim, dim);
        const int8_t *row = rows + (ptrdiff_t)ids[t] * dim + col;
        const __m512 s = _mm512_set1_ps(scales[ids[t]]);
        for (int v = 0; v < V; v++) {
            __m128i bytes;
            if (v < V - 1 || last == (__mmask16)0xFFFF) {
                bytes = _mm_loadu_si128((const __m128i *)(row + 16 * v));
            } else {  // a row's last columns when dim is not a multiple of 16: no read past the row
                int8_t tail[16] = {0};
                for (int k = 0; k < 16 && (1u << k) & last; k++) tail[k] = row[16 * v + k];
                bytes = _mm_loadu_si128((const __m128i *)tail);
            }
            acc[v] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), acc[v]);
        }
    }
    for (int v = 0; v < V; v++) {
        const __mmask16 m = v == V - 1 ? last : (__mmask16)0xFFFF;
        _mm512_mask_storeu_ps(sum + col + 16 * v, m, acc[v]);
    }
}

static AVX512 void sum_avx512(const int8_t *rows, const float *scales, ptrdiff_t dim, const int32_t *ids,
                              ptrdiff_t count, float *sum) {
    for (ptrdiff_t col = 0; col < dim; col += 128) {
        const ptrdiff_t width = dim - col < 128 ? dim - col : 128;
        const int V = (int)((width + 15) / 16);
        const __mmask16 last = (width % 16) ? (__mmask16)((1u << (width % 16)) - 1) : (__mmask16)0xFFFF;
        switch (V) {
        case 8: sum512(8, rows, scales, dim, col, last, ids, count, sum); break;
        case 7: sum512(7, rows, scales, dim, col, last, ids, count, sum); break;
        case 6: sum512(6, rows, scales, dim, col, last, ids, count, sum); break;
        case 5: sum512(5, rows, scales, dim, col, last, ids, count, sum); break;
        case 4: sum512(4, rows, scales, dim, col, last, ids, count, sum); break;
        case 3: sum512(3, rows, scales, dim, col, last, ids, count, sum); break;
        case 2: sum512(2, rows, scales, dim, col, last, ids, count, sum); break;
        default: sum512(1, rows, scales, dim, col, last, ids, count, sum); break;
        }
    }
}

// R rows × V vectors of 16 output columns from `col`, the last vector masked.
static inline AVX512 __attribute__((always_inline)) void project512(const int R, const int V, const float *x,
                                                                   ptrdiff_t dim, const float *map, const float *bias,
                                                                   ptrdiff_t outputs, ptrdiff_t col, __mmask16 last,
                                                                   float *y) {
    __m512 acc[6][4];
    for (int v = 0; v < V; v++) {
        const __mmask16 m = v == V - 1 ? last : (__mmask16)0xFFFF;
        const __m512 b = _mm512_maskz_loadu_ps(m, bias + col + 16 * v);
        for (int r = 0; r < R; r++) acc[r][v] = b;
    }
    for (ptrdiff_t i = 0; i < dim; i++) {
        __m512 w[4];
        for (int v = 0; v < V; v++) {
            const __mmask16 m = v == V - 1 ? last : (__mmask16)0xFFFF;
            w[v] = _mm512_maskz_loadu_ps(m, map + i * outputs + col + 16 * v);
        }
        for (int r = 0; r < R; r++) {
            const __m512 a = _mm512_set1_ps(x[r * dim + i]);
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_fmadd_ps(a, w[v], acc[r][v]);
        }
    }
    for (int r = 0; r < R; r++) {
        for (int v = 0; v < V; v++) {
            const __mmask16 m = v == V - 1 ? last : (__mmask16)0xFFFF;
            _mm512_mask_storeu_ps(y + r * outputs + col + 16 * v, m, acc[r][v]);
        }
    }
}

static inline AVX512 __attribute__((always_inline)) void project512_rows(const int R, const float *x, ptrdiff_t dim,
                                                                        const float *map, const float *bias,
                                                                        ptrdiff_t outputs, float *y) {
    for (ptrdiff_t col = 0; col < outputs; col += 64) {
        const ptrdiff_t width = outputs - col < 64 ? outputs - col : 64;
        const int V = (int)((width + 15) / 16);
        const __mmask16 last = (width % 16) ? (__mmask16)((1u << (width % 16)) - 1) : (__mmask16)0xFFFF;
        switch (V) {
        case 4: project512(R, 4, x, dim, map, bias, outputs, col, last, y); break;
        case 3: project512(R, 3, x, dim, map, bias, outputs, col, last, y); break;
        case 2: project512(R, 2, x, dim, map, bias, outputs, col, last, y); break;
        default: project512(R, 1, x, dim, map, bias, outputs, col, last, y); break;
        }
    }
}

static AVX512 void project_avx512(const float *x, ptrdiff_t count, ptrdiff_t dim, const float *map, const float *bias,
                                  ptrdiff_t outputs, float *y) {
    ptrdiff_t r = 0;
    for (; r + 6 <= count; r += 6) project512_rows(6, x + r * dim, dim, map, bias, outputs, y + r * outputs);
    const float *xr = x + r * dim;
    float *yr = y + r * outputs;
    switch (count - r) {
    case 5: project512_rows(5, xr, dim, map, bias, outputs, yr); break;
    case 4: project512_rows(4, xr, dim, map, bias, outputs, yr); break;
    case 3: project512_rows(3, xr, dim, map, bias, outputs, yr); break;
    case 2: project512_rows(2, xr, dim, map, bias, outputs, yr); break;
    case 1: project512_rows(1, xr, dim, map, bias, outputs, yr); break;
    default: break;
    }
}

// ---- AVX2 with FMA: V vectors of 8 columns, no masks (the columns past the last whole vector
// are done one at a time with fmaf, the same fused operation, so the bits match AVX-512's).

static inline AVX2 __attribute__((always_inline)) void sum256(const int V, const int8_t *rows, const float *scales,
                                                             ptrdiff_t dim, ptrdiff_t col, const int32_t *ids,
                                                             ptrdiff_t count, float *sum) {
    __m256 acc[8];
    for (int v = 0; v < V; v++) acc[v] = _mm256_setzero_ps();
    for (ptrdiff_t t = 0; t < count; t++) {
        if (col == 0 && t + AHEAD < count) prefetch_row(rows + (ptrdiff_t)ids[t + AHEAD] * dim, dim);
        const int8_t *row = rows + (ptrdiff_t)ids[t] * dim + col;
        const __m256 s = _mm256_set1_ps(scales[ids[t]]);
        for (int v = 0; v < V; v++) {
            const __m128i bytes = _mm_loadl_epi64((const __m128i *)(row + 8 * v));
            acc[v] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), acc[v]);
        }
    }
    for (int v = 0; v < V; v++) _mm256_storeu_ps(sum + col + 8 * v, acc[v]);
}

static AVX2 void sum_avx2(const int8_t *rows, const float *scales, ptrdiff_t dim, const int32_t *ids, ptrdiff_t count,
                          float *sum) {
    const ptrdiff_t whole = dim / 8 * 8;
    for (ptrdiff_t col = 0; col < whole; col += 64) {
        switch ((whole - col) / 8 < 8 ? (whole - col) / 8 : 8) {
        case 8: sum256(8, rows, scales, dim, col, ids, count, sum); break;
        case 7: sum256(7, rows, scales, dim, col, ids, count, sum); break;
        case 6: sum256(6, rows, scales, dim, col, ids, count, sum); break;
        case 5: sum256(5, rows, scales, dim, col, ids, count, sum); break;
        case 4: sum256(4, rows, scales, dim, col, ids, count, sum); break;
        case 3: sum256(3, rows, scales, dim, col, ids, count, sum); break;
        case 2: sum256(2, rows, scales, dim, col, ids, count, sum); break;
        default: sum256(1, rows, scales, dim, col, ids, count, sum); break;
        }
    }
    for (ptrdiff_t j = whole; j < dim; j++) {
        float a = 0;
        for (ptrdiff_t t = 0; t < count; t++) a = fmaf(scales[ids[t]], (float)rows[(ptrdiff_t)ids[t] * dim + j], a);
        sum[j] = a;
    }
}

static inline AVX2 __attribute__((always_inline)) void project256(const int R, const float *x, ptrdiff_t dim,
                                                                 const float *map, const float *bias,
                                                                 ptrdiff_t outputs, ptrdiff_t col, float *y) {
    __m256 acc[4][3];
    for (int v = 0; v < 3; v++) {
        const __m256 b = _mm256_loadu_ps(bias + col + 8 * v);
        for (int r = 0; r < R; r++) acc[r][v] = b;
    }
    for (ptrdiff_t i = 0; i < dim; i++) {
        const float *m = map + i * outputs + col;
        const __m256 w0 = _mm256_loadu_ps(m), w1 = _mm256_loadu_ps(m + 8), w2 = _mm256_loadu_ps(m + 16);
        for (int r = 0; r < R; r++) {
            const __m256 a = _mm256_set1_ps(x[r * dim + i]);
            acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(a, w2, acc[r][2]);
        }
    }
    for (int r = 0; r < R; r++) {
        for (int v = 0; v < 3; v++) _mm256_storeu_ps(y + r * outputs + col + 8 * v, acc[r][v]);
    }
}

static inline AVX2 __attribute__((always_inline)) void project256_rows(const int R, const float *x, ptrdiff_t dim,
                                                                      const float *map, const float *bias,
                                                                      ptrdiff_t outputs, float *y) {
    const ptrdiff_t whole = outputs / 24 * 24;
    for (ptrdiff_t col = 0; col < whole; col += 24) project256(R, x, dim, map, bias, outputs, col, y);
    for (int r = 0; r < R; r++) {
        for (ptrdiff_t j = whole; j < outputs; j++) {
            float a = bias[j];
            for (ptrdiff_t i = 0; i < dim; i++) a = fmaf(x[r * dim + i], map[i * outputs + j], a);
            y[r * outputs + j] = a;
        }
    }
}

static AVX2 void project_avx2(const float *x, ptrdiff_t count, ptrdiff_t dim, const float *map, const float *bias,
                              ptrdiff_t outputs, float *y) {
    ptrdiff_t r = 0;
    for (; r + 4 <= count; r += 4) project256_rows(4, x + r * dim, dim, map, bias, outputs, y + r * outputs);
    const float *xr = x + r * dim;
    float *yr = y + r * outputs;
    switch (count - r) {
    case 3: project256_rows(3, xr, dim, map, bias, outputs, yr); break;
    case 2: project256_rows(2, xr, dim, map, bias, outputs, yr); break;
    case 1: project256_rows(1, xr, dim, map, bias, outputs, yr); break;
    default: break;
    }
}

static AVX512 void normalize_avx512(float *v, ptrdiff_t n) {
    __m512 acc = _mm512_setzero_ps();
    ptrdiff_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 x = _mm512_loadu_ps(v + j);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(x, x));
    }
    float lanes[16];
    _mm512_storeu_ps(lanes, acc);
    for (; j < n; j++) {
        const float square = v[j] * v[j];
        lanes[j % 16] = lanes[j % 16] + square;
    }
    const float norm = sqrtf(lanes_total(lanes));
    const __m512 scale = _mm512_set1_ps(1.0f / (norm > 1e-12f ? norm : 1e-12f));
    j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(v + j, _mm512_mul_ps(_mm512_loadu_ps(v + j), scale));
    for (; j < n; j++) v[j] *= 1.0f / (norm > 1e-12f ? norm : 1e-12f);
}

// The same operations as quantize_portable on 16 lanes (max is exact in any order; the multiply,
// add and subtract are separate instructions, never fused), so the codes are the same bits.
static AVX512 float quantize_avx512(const float *v, ptrdiff_t n, int8_t *codes) {
    const __m512 largest = _mm512_set1_ps(3.4028235e38f);
    __m512 top = _mm512_setzero_ps();
    for (ptrdiff_t j = 0; j < n; j += 16) {
        const __mmask16 in = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(in, v + j));
        const __mmask16 finite = _mm512_mask_cmp_ps_mask(in, a, largest, _CMP_LE_OQ);
        top = _mm512_mask_max_ps(top, finite, top, a);
    }
    const float t = _mm512_reduce_max_ps(top);
    const float scale = t > 0 ? t / 127.0f : 1.0f;
    const __m512 inverse = _mm512_set1_ps(1.0f / scale);
    const __m512 magic = _mm512_set1_ps(12582912.0f), high = _mm512_set1_ps(127.0f), low = _mm512_set1_ps(-127.0f);
    for (ptrdiff_t j = 0; j < n; j += 16) {
        const __mmask16 in = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(in, v + j);
        const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(x), largest, _CMP_LE_OQ);
        __m512 y = _mm512_maskz_mov_ps(finite, _mm512_mul_ps(x, inverse));
        y = _mm512_max_ps(_mm512_min_ps(y, high), low);
        y = _mm512_sub_ps(_mm512_add_ps(y, magic), magic);
        _mm512_mask_cvtepi32_storeu_epi8(codes + j, in, _mm512_cvttps_epi32(y));
    }
    return scale;
}

static int quantize_level = -1;

float sl_quantize_i8(const float *v, ptrdiff_t n, int8_t *codes) {
    int level = __atomic_load_n(&quantize_level, __ATOMIC_RELAXED);
    if (level < 0) {
        level = sl_static_level();
        __atomic_store_n(&quantize_level, level, __ATOMIC_RELAXED);
    }
    return sl_quantize_i8_level(level, v, n, codes);
}

float sl_quantize_i8_level(int level, const float *v, ptrdiff_t n, int8_t *codes) {
    if (level >= 2) return quantize_avx512(v, n, codes);
    return quantize_portable(v, n, codes);
}

void sl_static_normalize(int level, float *v, ptrdiff_t n) {
    if (level >= 2) normalize_avx512(v, n);
    else normalize_portable(v, n);
}

void sl_static_sum(int level, const int8_t *rows, const float *scales, ptrdiff_t dim, const int32_t *ids,
                   ptrdiff_t count, float *sum) {
    if (level >= 2) sum_avx512(rows, scales, dim, ids, count, sum);
    else if (level == 1) sum_avx2(rows, scales, dim, ids, count, sum);
    else sum_portable(rows, scales, dim, ids, count, sum);
}

void sl_static_project(int level, const float *x, ptrdiff_t count, ptrdiff_t dim, const float *map, const float *bias,
                       ptrdiff_t outputs, float *y) {
    if (level >= 2) project_avx512(x, count, dim, map, bias, outputs, y);
    else if (level == 1) project_avx2(x, count, dim, map, bias, outputs, y);
    else project_portable(x, count, dim, map, bias, outputs, y);
}

#else

int sl_static_level(void) { return 0; }

float sl_quantize_i8(const float *v, ptrdiff_t n, int8_t *codes) { return quantize_portable(v, n, codes); }

float sl_quantize_i8_level(int level, const float *v, ptrdiff_t n, int8_t *codes) {
    (void)level;
    return quantize_portable(v, n, codes);
}

void sl_static_normalize(int level, float *v, ptrdiff_t n) {
    (void)level;
    normalize_portable(v, n);
}

void sl_static_sum(int level, const int8_t *rows, const float *scales, ptrdiff_t dim, const int32_t *ids,
                   ptrdiff_t count, float *sum) {
    (void)level;
    sum_portable(rows, scales, dim, ids, count, sum);
}

void sl_static_project(int level, const float *x, ptrdiff_t count, ptrdiff_t dim, const float *map, const float *bias,
                       ptrdiff_t outputs, float *y) {
    (void)level;
    project_portable(x, count, dim, map, bias, outputs, y);
}

#endif
