// The vector index's scans (VectorIndex): Hamming distances of 1-bit codes with the POPCNT
// instruction and int8 dot products with AVX-512BW, chosen at run time; VectorIndex keeps its
// portable Swift loops for CPUs without them. See vectors.c.
#ifndef SEARCHLIGHT_VECTOR_KERNELS_H
#define SEARCHLIGHT_VECTOR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/// 1 when this CPU runs POPCNT, AVX-512F and AVX-512BW (the functions below), else 0.
int sl_vector_kernels_available(void);

/// distances[i] = popcount(codes[i·words …] XOR query) for i in 0 ..< count; words <= 1024.
void sl_hamming(const uint64_t *codes, ptrdiff_t count, ptrdiff_t words, const uint64_t *query, uint16_t *distances);

/// Σ a[j]·b[j] over n int8 values, exact in 32 bits for n < 2^17.
int32_t sl_dot_i8(const int8_t *a, const int8_t *b, ptrdiff_t n);

/// A new file in `directory` open for reading and writing, with no name (O_TMPFILE; where the file
/// system has none, a named one unlinked at once): it is gone when its descriptor is closed or the
/// process ends, so a crash leaves nothing to read back. -1 with errno set when it cannot be made.
int sl_open_unnamed_file(const char *directory);

/// copy_file_range(2) (glibc declares it only with _GNU_SOURCE): up to `length` bytes from `in` at
/// *in_offset to `out` at *out_offset, both advanced; bytes copied, or -1 with errno set.
ptrdiff_t sl_copy_file_range(int in, int64_t *in_offset, int out, int64_t *out_offset, size_t length);

/// Gives the file system back the blocks of `length` bytes at `offset` (they read as zeros; the
/// size is kept): fallocate(2) with FALLOC_FL_PUNCH_HOLE. 0, or -1 with errno set.
int sl_punch_hole(int fd, int64_t offset, int64_t length);

#endif
