/* format_simd.h — declarations of the vector converters (format_avx2.c, format_avx512.c) and the
 * table rows they contribute to format.c. Included only by format.c and the ISA files. */
#ifndef MOQ_FORMAT_SIMD_H
#define MOQ_FORMAT_SIMD_H
#include "format/format.h"

/* Filled in by the vector implementation files; empty until they exist. */
#define MOQ_FORMAT_AVX512_ROWS
#define MOQ_FORMAT_AVX2_ROWS

#endif
