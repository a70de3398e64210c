// src/cpu/simd_intrinsics.h — <immintrin.h> for the *_avx512.cpp / *_avx2.cpp
// kernels, without GCC 12's false -Wmaybe-uninitialized inside the AVX-512
// intrinsics (their _mm512_undefined_* self-initialization; GCC bug 105593).
// The pragma covers the header's own lines, where GCC reports it.
#pragma once

#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (the fuzz build)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
