// ctxemb's int8 Linear for CPUs with AVX512-VNNI: per-token quantization, and a u8 x s8 -> s32 product whose
// dequantization, bias, outlier features and activation (or residual add and LayerNorm) are applied to each tile
// while it is still in registers, and whose output can leave the kernel already quantized for the next Linear.
// Compiled on first use by ctxemb.runtime.kernels (torch.utils.cpp_extension) with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mavx512vnni, and only loaded where the CPU reports those features.
//
// The scheme is ctxemb.runtime.int8's (its module docstring): for a token t (row) and an output channel o,
//   y[t, o] = s_x[t] * s_w[o] * (sum_k u[t, k] w[o, k] - zu[t] c[o]) + sum_j x[t, O_j] W_O[j, o] + b[o]
// with u = q + 128 in [0, 255] the unsigned form of the int8 activations and zu = z + 128 their zero point, so the
// int32 part is the same as torch._int_mm(q, w) - z c (both exact). The products are _mm512_dpbusd_epi32 (u8 x s8
// summed in fours into int32, exact at these K), on weights packed once into panels of 64 output channels.
#include "common.h"

#include <ATen/ATen.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

constexpr int kRows = 6;         // rows of a micro-tile (6 x 4 accumulators + 4 weight vectors + 1 broadcast <= 32)
constexpr int kVectors = 4;      // 16-channel vectors of a micro-tile: a panel is 64 output channels
constexpr int kPanel = 16 * kVectors;
constexpr int64_t kBlockRows = 48;  // rows per task: a panel's weights are reused across a block's micro-tiles

enum Activation : int64_t { kNone = 0, kGelu = 1, kGeluTanh = 2, kRelu = 3 };

// (N, K) int8 weights -> panels: for each panel of v <= 4 vectors (64 channels; the last may be narrower), K/4 steps
// of v * 64 bytes: channel c's 4 consecutive weights w[c, 4s..4s+3] at byte 4c of step s (the operand layout of
// vpdpbusd). Full panels are K * 64 bytes apart.
at::Tensor pack_weights(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kChar, "pack_weights: expected (N, K) int8, got ",
              weight.sizes(), " ", weight.scalar_type());
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(N % 16 == 0 && K % 4 == 0, "pack_weights: N must be a multiple of 16 and K of 4, got N ", N, ", K ", K);
  auto w = weight.contiguous();
  auto packed = at::empty({N * K}, weight.options());
  const int8_t* src = w.data_ptr<int8_t>();
  int8_t* dst = packed.data_ptr<int8_t>();
  const int64_t steps = K / 4;
  for (int64_t p0 = 0; p0 < N; p0 += kPanel) {
    const int64_t width = std::min<int64_t>(kPanel, N - p0);
    int8_t* panel = dst + p0 * K;
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t c = 0; c < width; ++c)
        std::memcpy(panel + (s * width + c) * 4, src + (p0 + c) * K + 4 * s, 4);
  }
  return packed;
}

// Per-token quantization of x (M, K) float32: (u, scale, zu, outliers), see quantize_row.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> quantize_rows(
    const at::Tensor& x, const c10::optional<at::Tensor>& keep, const c10::optional<at::Tensor>& outlier_index) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "quantize_rows: expected contiguous (M, K) float32, got ", x.sizes(), " ", x.scalar_type());
  const int64_t M = x.size(0), K = x.size(1);
  const Quantizer q = quantizer(keep, outlier_index, K);
  auto result = empty_quantized(M, K, q.P, x.options());
  const float* xp = x.data_ptr<float>();
  const QuantizedOutput out_q(result);
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) out_q.quantize(xp + t * K, t, q);
  });
  return result;
}

struct Epilogue {
  const float* x_scale;     // (M,)
  const int32_t* x_zero;    // (M,) zu
  const int32_t* w_sum;     // (N,) c
  const float* w_scale;     // (N,)
  const float* bias;        // (N,)
  const float* xo;          // (M, P) or null
  const float* wo;          // (P, N) or null
  int64_t P;
  int64_t activation;
  const float* residual;    // (M, N) or null: then y = residual + product (LayerNorm after the whole row)
  float* out;               // rows [out_row0, ...) of the (M, N) output: the output itself, or a block's scratch
  uint16_t* out_bf16;       // or the (M, N) output in bfloat16 (no activation, no residual): out is then null
  int64_t out_row0;
  int64_t N;
};

// GELU(v) = 0.5 v (1 + erf(v / sqrt 2)), erf(x) for x clamped to [-4, 4] (beyond, erf is +-1 in float32) as the
// rational function x P(x^2) / Q(x^2) that Eigen and XLA use for float32 (|error| < 5e-7 in float32 arithmetic), the
// division by vrcp14ps and one Newton step: 21 operations a vector, where erf by Abramowitz and Stegun 7.1.26 with
// its exp took 32 (the up-projection's GELU was a seventh of its time).
inline __m512 gelu_erf(__m512 v) {
  const __m512 x = _mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f)),
                                               _mm512_set1_ps(4.0f)), _mm512_set1_ps(-4.0f));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(-2.72614225801306e-10f), x2, _mm512_set1_ps(2.77068142495902e-08f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.10102402082508e-06f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.69250639462346e-05f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-7.34990630326855e-04f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.95459980854025e-03f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.60960333262415e-02f));
  __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(-1.45660718464996e-05f), x2, _mm512_set1_ps(-2.13374055278905e-04f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.68282697438203e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-7.37332916720468e-03f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.42647390514189e-02f));
  __m512 r = _mm512_rcp14_ps(q);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(2.0f)));  // r (2 - q r): relative error ~1e-8
  const __m512 erf = _mm512_mul_ps(_mm512_mul_ps(p, x), r);
  const __m512 half = _mm512_mul_ps(v, _mm512_set1_ps(0.5f));
  return _mm512_fmadd_ps(half, erf, half);
}

inline __m512 activate(__m512 v, int64_t activation) {
  using Vec = at::vec::Vectorized<float>;
  switch (activation) {
    case kGelu:
      return gelu_erf(v);
    case kGeluTanh: {  // 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3)))
      const Vec x(v);
      const Vec inner = Vec(static_cast<float>(M_2_SQRTPI * M_SQRT1_2)) * (x + Vec(0.044715f) * x * x * x);
      return x * Vec(0.5f) * (Vec(1.0f) + inner.tanh());
    }
    case kRelu:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    default:
      return v;
  }
}

// What a micro-tile's epilogue adds after the dequantization: the activation, the residual, the outlier features.
// The full tiles, which carry nearly all the work, take them as compile-time constants (Fixed: no branch and no
// reload of the Epilogue's fields between the tile's output vectors, which cost ~10% of a K = 384 product); the
// edge tiles read them from the Epilogue at run time (Runtime).
template <int64_t Act, bool Residual, bool Outliers, bool Bf16 = false>
struct Fixed {
  static constexpr int64_t activation(const Epilogue&) { return Act; }
  static constexpr bool residual(const Epilogue&) { return Residual; }
  static constexpr bool outliers(const Epilogue&) { return Outliers; }
  static constexpr bool bf16(const Epilogue&) { return Bf16; }
};

struct Runtime {
  static int64_t activation(const Epilogue& e) { return e.activation; }
  static bool residual(const Epilogue& e) { return e.residual != nullptr; }
  static bool outliers(const Epilogue& e) { return e.P != 0; }
  static bool bf16(const Epilogue& e) { return e.out_bf16 != nullptr; }
};

// 16 floats rounded to bfloat16 by integer arithmetic, so the kernel needs no AVX512-BF16, as vcvtneps2bf16 converts
// finite values (the attention kernel's rounding of float32 operands): zeros and denormals to a zero of their sign,
// the rest to nearest, ties to even: (bits + 0x7FFF + bit 16) >> 16, narrowed.
inline __m256i to_bf16(__m512 y) {
  __m512i bits = _mm512_castps_si512(y);
  const __mmask16 tiny = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));  // exponent 0
  bits = _mm512_mask_and_epi32(bits, tiny, bits, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
}

// The int32 sums of a micro-tile: sums[i][16 j + l] = sum_k a[i, k] w[n0 + 16 j + l, k] for R rows of a (lda apart)
// and the V vectors of the packed panel (width vectors per step). Not inlined into the tile: with the epilogue in
// the same function, GCC keeps a memory copy of the accumulators inside the product loop (a store per vpdpbusd).
template <int R, int V>
__attribute__((noinline)) void tile_sums(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t width,
                                         int64_t steps, int32_t (&sums)[R][16 * V]) {
  __m512i acc[R][V];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) acc[i][j] = _mm512_setzero_si512();
  const int8_t* b = panel;
  const int64_t stride = width * 64;
  for (int64_t s = 0; s < steps; ++s, b += stride) {
    __m512i w[V];
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) w[j] = _mm512_loadu_si512(b + 64 * j);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      int32_t four;  // 4 activation bytes (memcpy: no aliasing of uint8 data as int32; compiles to one load)
      std::memcpy(&four, a + i * lda + 4 * s, 4);
      const __m512i x = _mm512_set1_epi32(four);
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], x, w[j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) _mm512_store_si512(sums[i] + 16 * j, acc[i][j]);
}

// One micro-tile: rows [t0, t0 + R) x channels [n0, n0 + 16 V) of the output, from the packed panel `panel`
// (width vectors per step), finished as Kind says.
template <int R, int V, typename Kind>
inline void tile(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t width, int64_t steps, int64_t t0,
                 int64_t n0, const Epilogue& e) {
  alignas(64) int32_t sums[R][16 * V];
  tile_sums<R, V>(a, lda, panel, width, steps, sums);
  // the Epilogue's fields in locals: the output stores could alias them, so GCC would reload each one per vector
  const int64_t N = e.N, P = e.P, activation = Kind::activation(e);
  const float* __restrict xo = P ? e.xo + t0 * P : nullptr;
  const float* __restrict wo = P ? e.wo + n0 : nullptr;
  const float* __restrict residual = Kind::residual(e) ? e.residual + t0 * N + n0 : nullptr;
  float* __restrict out = Kind::bf16(e) ? nullptr : e.out + (t0 - e.out_row0) * N + n0;
  uint16_t* __restrict out16 = Kind::bf16(e) ? e.out_bf16 + t0 * N + n0 : nullptr;
  __m512i zero[R];
  __m512 scale[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    zero[i] = _mm512_set1_epi32(e.x_zero[t0 + i]);
    scale[i] = _mm512_set1_ps(e.x_scale[t0 + i]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < V; ++j) {
    const __m512i c = _mm512_loadu_si512(e.w_sum + n0 + 16 * j);
    const __m512 ws = _mm512_loadu_ps(e.w_scale + n0 + 16 * j), bias = _mm512_loadu_ps(e.bias + n0 + 16 * j);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i exact = _mm512_sub_epi32(_mm512_load_si512(sums[i] + 16 * j), _mm512_mullo_epi32(zero[i], c));
      __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale[i]), ws, bias);
      if (Kind::outliers(e))
        for (int64_t p = 0; p < P; ++p)
          y = _mm512_fmadd_ps(_mm512_set1_ps(xo[i * P + p]), _mm512_loadu_ps(wo + p * N + 16 * j), y);
      if (Kind::residual(e)) y = _mm512_add_ps(y, _mm512_loadu_ps(residual + i * N + 16 * j));
      else y = activate(y, activation);
      if (Kind::bf16(e)) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out16 + i * N + 16 * j), to_bf16(y));
      else _mm512_storeu_ps(out + i * N + 16 * j, y);
    }
  }
}

template <int R>
inline void tile_rows(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t width, int64_t steps, int64_t t0,
                      int64_t n0, const Epilogue& e) {
  switch (width) {
    case 4: tile<R, 4, Runtime>(a, lda, panel, width, steps, t0, n0, e); break;
    case 3: tile<R, 3, Runtime>(a, lda, panel, width, steps, t0, n0, e); break;
    case 2: tile<R, 2, Runtime>(a, lda, panel, width, steps, t0, n0, e); break;
    default: tile<R, 1, Runtime>(a, lda, panel, width, steps, t0, n0, e); break;
  }
}

// f(Fixed<...>{}) for the epilogue `e` asks for.
template <typename F>
inline void with_kind(const Epilogue& e, F&& f) {
  const bool outliers = e.P != 0;
  if (e.out_bf16) {
    if (outliers) f(Fixed<kNone, false, true, true>{});
    else f(Fixed<kNone, false, false, true>{});
    return;
  }
  if (e.residual) {
    if (outliers) f(Fixed<kNone, true, true>{});
    else f(Fixed<kNone, true, false>{});
    return;
  }
  switch (e.activation) {
    case kGelu: if (outliers) f(Fixed<kGelu, false, true>{}); else f(Fixed<kGelu, false, false>{}); break;
    case kGeluTanh:
      if (outliers) f(Fixed<kGeluTanh, false, true>{}); else f(Fixed<kGeluTanh, false, false>{});
      break;
    case kRelu: if (outliers) f(Fixed<kRelu, false, true>{}); else f(Fixed<kRelu, false, false>{}); break;
    default: if (outliers) f(Fixed<kNone, false, true>{}); else f(Fixed<kNone, false, false>{}); break;
  }
}

// The sum over a row's N values (N a multiple of 16) of acc = f(acc, v), in kChains independent chains of vectors.
template <typename F>
inline float row_sum(const float* row, int64_t N, F f) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_ps();
  int64_t n = 0;
  for (; n + 16 * kChains <= N; n += 16 * kChains)
#pragma GCC unroll 4
    for (int c = 0; c < kChains; ++c) acc[c] = f(acc[c], _mm512_loadu_ps(row + n + 16 * c));
  for (; n < N; n += 16) acc[0] = f(acc[0], _mm512_loadu_ps(row + n));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// LayerNorm of each row, in place (N a multiple of 16): the mean, then the variance about it, then the normalized
// row; the row is in L1.
void layer_norm_rows(float* y, int64_t rows, int64_t N, const float* gamma, const float* beta, float eps) {
  for (int64_t t = 0; t < rows; ++t) {
    float* row = y + t * N;
    const __m512 mean = _mm512_set1_ps(row_sum(row, N, [](__m512 acc, __m512 v) { return _mm512_add_ps(acc, v); }) /
                                       static_cast<float>(N));
    const float var = row_sum(row, N, [&](__m512 acc, __m512 v) {
      const __m512 d = _mm512_sub_ps(v, mean);
      return _mm512_fmadd_ps(d, d, acc);
    }) / static_cast<float>(N);
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
    for (int64_t n = 0; n < N; n += 16) {
      const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(row + n), mean), inv);
      _mm512_storeu_ps(row + n, _mm512_fmadd_ps(d, _mm512_loadu_ps(gamma + n), _mm512_loadu_ps(beta + n)));
    }
  }
}

// The arguments of a product, checked: u (M, K) uint8 with its scale and zu (M,), the packed weights with their
// column sums, scales and bias (N,), the outlier features (M, P) and their weights (P, N), the residual (M, N).
Epilogue epilogue(const at::Tensor& u, const at::Tensor& x_scale, const at::Tensor& x_zero, const at::Tensor& packed,
                  const at::Tensor& w_sum, const at::Tensor& w_scale, const at::Tensor& bias,
                  const c10::optional<at::Tensor>& xo, const c10::optional<at::Tensor>& wo, int64_t activation,
                  const c10::optional<at::Tensor>& residual) {
  TORCH_CHECK(u.dim() == 2 && u.scalar_type() == at::kByte && u.is_contiguous(), "int8 linear: u must be (M, K) uint8");
  const int64_t M = u.size(0), K = u.size(1), N = w_sum.numel();
  TORCH_CHECK(packed.numel() == N * K && K % 4 == 0 && N % 16 == 0, "int8 linear: packed weights hold ",
              packed.numel(), " values, expected N * K = ", N, " * ", K, " (N a multiple of 16, K of 4)");
  TORCH_CHECK(x_scale.numel() == M && x_zero.numel() == M && w_scale.numel() == N && bias.numel() == N,
              "int8 linear: scales, zero points or bias of the wrong size");
  TORCH_CHECK(!residual.has_value() || (residual->sizes() == at::IntArrayRef({M, N}) && residual->is_contiguous() &&
                                        residual->scalar_type() == at::kFloat),
              "int8 linear: residual must be contiguous (M, N) float32");
  Epilogue e{x_scale.data_ptr<float>(), x_zero.data_ptr<int32_t>(), w_sum.data_ptr<int32_t>(),
             w_scale.data_ptr<float>(), bias.data_ptr<float>(), nullptr, nullptr, 0, activation,
             residual.has_value() ? residual->data_ptr<float>() : nullptr, nullptr, nullptr, 0, N};
  if (xo.has_value() && xo->numel()) {
    TORCH_CHECK(wo.has_value() && xo->size(0) == M && wo->size(0) == xo->size(1) && wo->size(1) == N,
                "int8 linear: outlier features (M, P) need weights (P, N)");
    e.xo = xo->data_ptr<float>();
    e.wo = wo->data_ptr<float>();
    e.P = xo->size(1);
  }
  return e;
}

// The product in parallel: the rows split into one contiguous part per thread, equal to within a micro-tile (fixed
// blocks shared out in turn left one thread up to a block more rows: 7% of a 896-row product on 2 threads), each
// part in blocks of up to kBlockRows rows: each block's micro-tiles for every panel, written through `e` (out,
// out_row0 set per block by `target`), then `finish(r0, r1, rows)` on the block's finished rows.
template <typename Target, typename Finish>
void run_blocks(const uint8_t* a, int64_t M, int64_t K, const int8_t* w, const Epilogue& base, Target target,
                Finish finish) {
  const int64_t N = base.N, steps = K / 4;
  const int64_t tiles = (M + kRows - 1) / kRows;
  const int64_t parts = std::min<int64_t>(at::get_num_threads(), tiles);
  at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
    Epilogue e = base;
    const int64_t lo = std::min(M, tiles * begin / parts * kRows), hi = std::min(M, tiles * end / parts * kRows);
    for (int64_t r0 = lo; r0 < hi; r0 += kBlockRows) {
      const int64_t r1 = std::min(hi, r0 + kBlockRows);
      e.out = target(r0);
      e.out_row0 = r0;
      for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
        const int64_t width = std::min<int64_t>(kPanel, N - n0) / 16;
        const int8_t* panel = w + n0 * K;
        int64_t t = r0;
        if (width == kVectors)
          with_kind(e, [&](auto kind) {
            for (; t + kRows <= r1; t += kRows)
              tile<kRows, kVectors, decltype(kind)>(a + t * K, K, panel, width, steps, t, n0, e);
          });
        for (; t + kRows <= r1; t += kRows) tile_rows<kRows>(a + t * K, K, panel, width, steps, t, n0, e);
        switch (r1 - t) {
          case 5: tile_rows<5>(a + t * K, K, panel, width, steps, t, n0, e); break;
          case 4: tile_rows<4>(a + t * K, K, panel, width, steps, t, n0, e); break;
          case 3: tile_rows<3>(a + t * K, K, panel, width, steps, t, n0, e); break;
          case 2: tile_rows<2>(a + t * K, K, panel, width, steps, t, n0, e); break;
          case 1: tile_rows<1>(a + t * K, K, panel, width, steps, t, n0, e); break;
          default: break;
        }
      }
      finish(r0, r1, e.out);
    }
  });
}

}  // namespace

// activation(s_x s_w (u w^T - zu c) + xo wo + b), or LayerNorm(residual + that without activation): (M, N) float32.
at::Tensor int8_linear(const at::Tensor& u, const at::Tensor& x_scale, const at::Tensor& x_zero,
                       const at::Tensor& packed, const at::Tensor& w_sum, const at::Tensor& w_scale,
                       const at::Tensor& bias, const c10::optional<at::Tensor>& xo,
                       const c10::optional<at::Tensor>& wo, int64_t activation,
                       const c10::optional<at::Tensor>& residual, const c10::optional<at::Tensor>& ln_weight,
                       const c10::optional<at::Tensor>& ln_bias, double eps) {
  const Epilogue e = epilogue(u, x_scale, x_zero, packed, w_sum, w_scale, bias, xo, wo, activation, residual);
  const int64_t M = u.size(0), K = u.size(1), N = e.N;
  auto out = at::empty({M, N}, x_scale.options());
  float* op = out.data_ptr<float>();
  const float* gamma = ln_weight.has_value() ? ln_weight->data_ptr<float>() : nullptr;
  const float* beta = ln_bias.has_value() ? ln_bias->data_ptr<float>() : nullptr;
  TORCH_CHECK(!gamma || (ln_weight->numel() == N && ln_bias.has_value() && ln_bias->numel() == N),
              "int8 linear: LayerNorm weight and bias must be (N,)");
  run_blocks(u.data_ptr<uint8_t>(), M, K, packed.data_ptr<int8_t>(), e, [&](int64_t r0) { return op + r0 * N; },
             [&](int64_t r0, int64_t r1, float* rows) {
               if (gamma) layer_norm_rows(rows, r1 - r0, N, gamma, beta, static_cast<float>(eps));
             });
  return out;
}

// s_x s_w (u w^T - zu c) + xo wo + b as int8_linear gives it (no activation), rounded to bfloat16: (M, N) bfloat16, for
// the attention kernel's bf16 products (Q/K/V), half the bytes of the float32 output to write and read back.
at::Tensor int8_linear_bf16(const at::Tensor& u, const at::Tensor& x_scale, const at::Tensor& x_zero,
                            const at::Tensor& packed, const at::Tensor& w_sum, const at::Tensor& w_scale,
                            const at::Tensor& bias, const c10::optional<at::Tensor>& xo,
                            const c10::optional<at::Tensor>& wo) {
  Epilogue e = epilogue(u, x_scale, x_zero, packed, w_sum, w_scale, bias, xo, wo, kNone, c10::nullopt);
  const int64_t M = u.size(0), K = u.size(1);
  auto out = at::empty({M, e.N}, x_scale.options().dtype(at::kBFloat16));
  e.out_bf16 = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  run_blocks(u.data_ptr<uint8_t>(), M, K, packed.data_ptr<int8_t>(), e, [](int64_t) { return nullptr; },
             [](int64_t, int64_t, float*) {});
  return out;
}

// LayerNorm(residual + the product), as int8_linear gives it, and that output also quantized for the next Linear (its
// keep mask and outlier features), each finished block's rows while they are in L1/L2: (y, u, scale, zu, outliers),
// the last four as quantize_rows would give for y.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> int8_linear_norm_quantized(
    const at::Tensor& u, const at::Tensor& x_scale, const at::Tensor& x_zero, const at::Tensor& packed,
    const at::Tensor& w_sum, const at::Tensor& w_scale, const at::Tensor& bias, const c10::optional<at::Tensor>& xo,
    const c10::optional<at::Tensor>& wo, const at::Tensor& residual, const at::Tensor& ln_weight,
    const at::Tensor& ln_bias, double eps, const c10::optional<at::Tensor>& next_keep,
    const c10::optional<at::Tensor>& next_outlier_index) {
  const Epilogue e = epilogue(u, x_scale, x_zero, packed, w_sum, w_scale, bias, xo, wo, kNone, residual);
  const int64_t M = u.size(0), K = u.size(1), N = e.N;
  TORCH_CHECK(ln_weight.numel() == N && ln_bias.numel() == N, "int8 linear: LayerNorm weight and bias must be (N,)");
  auto out = at::empty({M, N}, x_scale.options());
  float* op = out.data_ptr<float>();
  const float *gamma = ln_weight.data_ptr<float>(), *beta = ln_bias.data_ptr<float>();
  const Quantizer q = quantizer(next_keep, next_outlier_index, N);
  auto result = empty_quantized(M, N, q.P, x_scale.options());
  const QuantizedOutput out_q(result);
  run_blocks(u.data_ptr<uint8_t>(), M, K, packed.data_ptr<int8_t>(), e, [&](int64_t r0) { return op + r0 * N; },
             [&](int64_t r0, int64_t r1, float* rows) {
               layer_norm_rows(rows, r1 - r0, N, gamma, beta, static_cast<float>(eps));
               for (int64_t t = r0; t < r1; ++t)
                 out_q.quantize(rows + (t - r0) * N, t, q);
             });
  return std::make_tuple(out, std::get<0>(result), std::get<1>(result), std::get<2>(result), std::get<3>(result));
}

// The same product with its activation, quantized for the next Linear (its keep mask and outlier features) block by
// block, so its float32 output never leaves a per-thread scratch of kBlockRows x N: (u, scale, zu, outliers) as
// quantize_rows would give for the float32 output.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> int8_linear_quantized(
    const at::Tensor& u, const at::Tensor& x_scale, const at::Tensor& x_zero, const at::Tensor& packed,
    const at::Tensor& w_sum, const at::Tensor& w_scale, const at::Tensor& bias, const c10::optional<at::Tensor>& xo,
    const c10::optional<at::Tensor>& wo, int64_t activation, const c10::optional<at::Tensor>& next_keep,
    const c10::optional<at::Tensor>& next_outlier_index) {
  const Epilogue e = epilogue(u, x_scale, x_zero, packed, w_sum, w_scale, bias, xo, wo, activation, c10::nullopt);
  const int64_t M = u.size(0), K = u.size(1), N = e.N;
  const Quantizer q = quantizer(next_keep, next_outlier_index, N);
  auto result = empty_quantized(M, N, q.P, x_scale.options());
  const QuantizedOutput out_q(result);
  // one scratch block per thread (at::parallel_for runs one chunk per thread at a time); left uninitialised: every
  // value is written by the product before it is read (a zero-filled vector cost a memset per call)
  auto scratch = at::empty({at::get_num_threads(), kBlockRows * N}, x_scale.options());
  float* scratch_base = scratch.data_ptr<float>();
  run_blocks(u.data_ptr<uint8_t>(), M, K, packed.data_ptr<int8_t>(), e,
             [&](int64_t) { return scratch_base + at::get_thread_num() * kBlockRows * N; },
             [&](int64_t r0, int64_t r1, float* rows) {
               for (int64_t t = r0; t < r1; ++t)
                 out_q.quantize(rows + (t - r0) * N, t, q);
             });
  return result;
}

// The embeddings of a BERT-layout encoder, LayerNorm(word[ids] + position[positions] + type[types]) token by token
// (no types given: type row 0; no type table: no third term), and the same quantized for the first Linear (its keep
// mask and outlier features) while the row is in L1: (y (B*T, E), u, scale, zu, outliers), the last four as
// quantize_rows would give for y. Every id is checked against its table before any row is read.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> embed_norm_quantized(
    const at::Tensor& ids, const at::Tensor& positions, const c10::optional<at::Tensor>& types,
    const at::Tensor& word, const at::Tensor& position, const c10::optional<at::Tensor>& type,
    const at::Tensor& ln_weight, const at::Tensor& ln_bias, double eps, const c10::optional<at::Tensor>& next_keep,
    const c10::optional<at::Tensor>& next_outlier_index) {
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong, "embeddings: ids must be (B, T) int64, got ",
              ids.sizes(), " ", ids.scalar_type());
  TORCH_CHECK(positions.sizes() == ids.sizes() && positions.scalar_type() == at::kLong,
              "embeddings: positions must be int64 of the ids' shape ", ids.sizes(), ", got ", positions.sizes());
  TORCH_CHECK(types.has_value() <= type.has_value(), "embeddings: token types given without a type table");
  TORCH_CHECK(!types.has_value() || (types->sizes() == ids.sizes() && types->scalar_type() == at::kLong),
              "embeddings: token types must be int64 of the ids' shape ", ids.sizes());
  const int64_t E = word.size(-1);
  for (const at::Tensor* table : {&word, &position, type.has_value() ? &*type : &word})
    TORCH_CHECK(table->dim() == 2 && table->size(1) == E && table->scalar_type() == at::kFloat &&
                table->is_contiguous(), "embeddings: tables must be contiguous (rows, ", E, ") float32, got ",
                table->sizes(), " ", table->scalar_type());
  TORCH_CHECK(E % 16 == 0, "embeddings: the width must be a multiple of 16, got ", E);
  TORCH_CHECK(ln_weight.numel() == E && ln_bias.numel() == E, "embeddings: LayerNorm weight and bias must be (E,)");
  const at::Tensor id = ids.contiguous(), pos = positions.contiguous();
  const at::Tensor tt = types.has_value() ? types->contiguous() : at::Tensor();
  const int64_t M = ids.numel();
  const int64_t* ip = id.data_ptr<int64_t>();
  const int64_t* pp = pos.data_ptr<int64_t>();
  const int64_t* tp = tt.defined() ? tt.data_ptr<int64_t>() : nullptr;
  for (int64_t t = 0; t < M; ++t) {
    TORCH_CHECK(ip[t] >= 0 && ip[t] < word.size(0), "embeddings: token id ", ip[t], " at position ", t,
                " is outside the vocabulary of ", word.size(0));
    TORCH_CHECK(pp[t] >= 0 && pp[t] < position.size(0), "embeddings: position ", pp[t], " is outside the ",
                position.size(0), " position embeddings");
    TORCH_CHECK(!tp || (tp[t] >= 0 && tp[t] < type->size(0)), "embeddings: token type ", tp ? tp[t] : 0,
                " is outside the ", type.has_value() ? type->size(0) : 0, " token types");
  }
  const float *wp = word.data_ptr<float>(), *ppos = position.data_ptr<float>();
  const float* typ = type.has_value() ? type->data_ptr<float>() : nullptr;
  const float *gamma = ln_weight.data_ptr<float>(), *beta = ln_bias.data_ptr<float>();
  auto out = at::empty({M, E}, word.options());
  float* op = out.data_ptr<float>();
  const Quantizer q = quantizer(next_keep, next_outlier_index, E);
  auto result = empty_quantized(M, E, q.P, word.options());
  const QuantizedOutput out_q(result);
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = op + t * E;
      const float *a = wp + ip[t] * E, *b = ppos + pp[t] * E, *c = typ ? typ + (tp ? tp[t] : 0) * E : nullptr;
      for (int64_t n = 0; n < E; n += 16) {  // (word + position) + type: torch's order of the two adds
        __m512 x = _mm512_add_ps(_mm512_loadu_ps(a + n), _mm512_loadu_ps(b + n));
        if (c) x = _mm512_add_ps(x, _mm512_loadu_ps(c + n));
        _mm512_storeu_ps(row + n, x);
      }
      layer_norm_rows(row, 1, E, gamma, beta, static_cast<float>(eps));
      out_q.quantize(row, t, q);
    }
  });
  return std::make_tuple(out, std::get<0>(result), std::get<1>(result), std::get<2>(result), std::get<3>(result));
}

TORCH_LIBRARY(ctxemb_int8, m) {
  m.def("pack_weights(Tensor weight) -> Tensor", &pack_weights);
  m.def("quantize_rows(Tensor x, Tensor? keep, Tensor? outlier_index) -> (Tensor, Tensor, Tensor, Tensor)",
        &quantize_rows);
  m.def("linear(Tensor u, Tensor x_scale, Tensor x_zero, Tensor packed, Tensor w_sum, Tensor w_scale, Tensor bias, "
        "Tensor? xo, Tensor? wo, int activation, Tensor? residual, Tensor? ln_weight, Tensor? ln_bias, float eps) "
        "-> Tensor", &int8_linear);
  m.def("linear_bf16(Tensor u, Tensor x_scale, Tensor x_zero, Tensor packed, Tensor w_sum, Tensor w_scale, "
        "Tensor bias, Tensor? xo, Tensor? wo) -> Tensor", &int8_linear_bf16);
  m.def("linear_quantized(Tensor u, Tensor x_scale, Tensor x_zero, Tensor packed, Tensor w_sum, Tensor w_scale, "
        "Tensor bias, Tensor? xo, Tensor? wo, int activation, Tensor? next_keep, Tensor? next_outlier_index) "
        "-> (Tensor, Tensor, Tensor, Tensor)", &int8_linear_quantized);
  m.def("linear_norm_quantized(Tensor u, Tensor x_scale, Tensor x_zero, Tensor packed, Tensor w_sum, "
        "Tensor w_scale, Tensor bias, Tensor? xo, Tensor? wo, Tensor residual, Tensor ln_weight, Tensor ln_bias, "
        "float eps, Tensor? next_keep, Tensor? next_outlier_index) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
        &int8_linear_norm_quantized);
  m.def("embed_norm_quantized(Tensor ids, Tensor positions, Tensor? types, Tensor word, Tensor position, "
        "Tensor? type, Tensor ln_weight, Tensor ln_bias, float eps, Tensor? next_keep, Tensor? next_outlier_index) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)", &embed_norm_quantized);
}
