// OpenBLAS's CBLAS interface (Debian: libopenblas-dev; pkg-config openblas). Only
// SearchlightSemantic links it: the transformer's matrix products (cblas_sgemm).
#include <cblas.h>
