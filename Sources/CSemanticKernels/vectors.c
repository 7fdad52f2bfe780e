// Swift compiles for the x86-64 baseline, which has no POPCNT: `nonzeroBitCount` became a
// bit-twiddling sequence, and the int8 dot product's widening SIMD16 loop SSE2 code. These are
// the same loops for the instructions the CPU has, picked once at run time.
#include "CVectorKernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

int sl_vector_kernels_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

__attribute__((target("popcnt"))) void sl_hamming(const uint64_t *codes, ptrdiff_t count, ptrdiff_t words,
                                                 const uint64_t *query, uint16_t *distances) {
    if (words == 6) {  // 384 dimensions: the loop unrolled
        const uint64_t q0 = query[0], q1 = query[1], q2 = query[2], q3 = query[3], q4 = query[4], q5 = query[5];
        for (ptrdiff_t i = 0; i < count; i++) {
            const uint64_t *c = codes + i * 6;
            distances[i] = (uint16_t)(__builtin_popcountll(c[0] ^ q0) + __builtin_popcountll(c[1] ^ q1) +
                                      __builtin_popcountll(c[2] ^ q2) + __builtin_popcountll(c[3] ^ q3) +
                                      __builtin_popcountll(c[4] ^ q4) + __builtin_popcountll(c[5] ^ q5));
        }
        return;
    }
    for (ptrdiff_t i = 0; i < count; i++) {
        const uint64_t *c = codes + i * words;
        unsigned d = 0;
        for (ptrdiff_t w = 0; w < words; w++) d += (unsigned)__builtin_popcountll(c[w] ^ query[w]);
        distances[i] = (uint16_t)d;
    }
}

__attribute__((target("avx512f,avx512bw"))) int32_t sl_dot_i8(const int8_t *a, const int8_t *b, ptrdiff_t n) {
    __m512i acc = _mm512_setzero_si512();
    ptrdiff_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(a + j)));
        const __m512i y = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(b + j)));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x, y));  // pairs of int16 products: no overflow
    }
    int32_t sum = _mm512_reduce_add_epi32(acc);
    for (; j < n; j++) sum += (int32_t)a[j] * (int32_t)b[j];
    return sum;
}

#else

int sl_vector_kernels_available(void) { return 0; }
void sl_hamming(const uint64_t *codes, ptrdiff_t count, ptrdiff_t words, const uint64_t *query, uint16_t *distances) {
    (void)codes; (void)count; (void)words; (void)query; (void)distances;
}
int32_t sl_dot_i8(const int8_t *a, const int8_t *b, ptrdiff_t n) { (void)a; (void)b; (void)n; return 0; }

#endif
