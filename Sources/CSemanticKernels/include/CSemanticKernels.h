// The transformer's linear layers for short passes (a query's 8 to 64 tokens): half-precision
// weights packed in panels, converted on the fly and multiplied in single precision with AVX-512.
// See linear.c for why; TransformerEncoder uses them when sl_linear_available() says the CPU can.
#ifndef SEARCHLIGHT_SEMANTIC_KERNELS_H
#define SEARCHLIGHT_SEMANTIC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "CVectorKernels.h"
#include "CStaticKernels.h"

/// Output columns per panel: every `outputs` given to these functions is a multiple of it.
#define SL_PANEL 48

/// 1 when this CPU (and the kernel's saved state) runs AVX-512F and F16C, else 0; the other
/// functions must not be called when it is 0.
int sl_linear_available(void);

/// Packs a PyTorch Linear weight, `weight[outputs][inputs]` in single precision, into half-precision
/// panels: panel p holds columns p·48 … p·48+47 as `inputs` rows of 48 halves, contiguous, so that
/// a product streams each panel once, front to back. `packed` has outputs·inputs halves.
void sl_linear_pack(const float *weight, ptrdiff_t outputs, ptrdiff_t inputs, uint16_t *packed);

/// y[r][j] = bias[j] + Σ_k x[r][k] · W[j][k] for rows 0 ..< rows and the columns of panels
/// firstPanel ..< endPanel (x is rows × inputs, y rows × outputs, both row-major, dense).
/// Disjoint panel ranges may run on different threads at once.
void sl_linear_f16(const float *x, ptrdiff_t rows, ptrdiff_t inputs, const uint16_t *packed, const float *bias,
                   ptrdiff_t outputs, float *y, ptrdiff_t firstPanel, ptrdiff_t endPanel);

/// BERT's exact GELU in place, x · Φ(x) = 0.5 · x · (1 + erf(x / √2)), 16 lanes at a time, with
/// erf to within 2e-7 (Abramowitz and Stegun 7.1.26) instead of libm's erff one value at a time.
void sl_gelu(float *x, ptrdiff_t count);

#endif
