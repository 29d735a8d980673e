// What ctxemb's native kernels share: the per-token quantization of a row for the next int8 Linear (the scheme of
// ctxemb.runtime.int8, its module docstring), and exp on non-positive inputs (the softmaxes).
// Included by int8_vnni.cpp and attention.cpp, which are compiled into one library (ctxemb.runtime.kernels).
#pragma once

#include <ATen/ATen.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

namespace {

// What quantizes a Linear's input: keep[k] = 1 for the inlier features and 0 for the outliers (or null: none), and
// the P outlier features' indices, gathered in float32.
struct Quantizer {
  const float* keep;
  const int64_t* outlier_index;
  int64_t P;
};

Quantizer quantizer(const c10::optional<at::Tensor>& keep, const c10::optional<at::Tensor>& outlier_index,
                    int64_t K) {
  Quantizer q{nullptr, nullptr, 0};
  if (keep.has_value()) {
    TORCH_CHECK(keep->numel() == K && keep->scalar_type() == at::kFloat && keep->is_contiguous(),
                "keep must be (", K, ",) float32");
    q.keep = keep->data_ptr<float>();
  }
  if (outlier_index.has_value() && outlier_index->numel()) {
    TORCH_CHECK(outlier_index->scalar_type() == at::kLong && outlier_index->is_contiguous(),
                "outlier_index must be int64");
    q.outlier_index = outlier_index->data_ptr<int64_t>();
    q.P = outlier_index->numel();
  }
  return q;
}

constexpr int kChains = 4;  // independent accumulators of a reduction over a row's vectors

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// One token's asymmetric quantization over its inlier features, as ctxemb.quantization's _quantize (the same
// float operations, so the same integers): u = q + 128 in [0, 255], the scale, zu = z + 128, and the
// outlier features in float32.
inline void quantize_row(const float* row, int64_t K, const Quantizer& q, uint8_t* u, float* scale, int32_t* zero,
                         float* xo) {
  // min(., 0) and max(., 0) from the start, in kChains independent chains of vectors (one chain's dependent
  // min/max were the row's latency); the result does not depend on the order
  __m512 lo[kChains], hi[kChains];
  for (int c = 0; c < kChains; ++c) lo[c] = hi[c] = _mm512_setzero_ps();
  const auto take = [&](int64_t k, __mmask16 m, int c) {
    __m512 v = _mm512_maskz_loadu_ps(m, row + k);
    if (q.keep) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, q.keep + k));
    lo[c] = _mm512_min_ps(lo[c], v);
    hi[c] = _mm512_max_ps(hi[c], v);
  };
  int64_t k = 0;
  for (; k + 16 * kChains <= K; k += 16 * kChains)
#pragma GCC unroll 4
    for (int c = 0; c < kChains; ++c) take(k + 16 * c, 0xFFFF, c);
  for (; k < K; k += 16) take(k, tail_mask(K - k), 0);
  for (int c = 1; c < kChains; ++c) {
    lo[0] = _mm512_min_ps(lo[0], lo[c]);
    hi[0] = _mm512_max_ps(hi[0], hi[c]);
  }
  const float low = _mm512_reduce_min_ps(lo[0]);
  const float s = std::max(_mm512_reduce_max_ps(hi[0]) - low, std::numeric_limits<float>::min()) / 255.0f;
  const float z = std::nearbyint(-low / s) - 128.0f;
  *scale = s;
  *zero = static_cast<int32_t>(z) + 128;
  // clamp(round(v / s) + z, -128, 127) + 128 as clamp(round(v / s) + zu, 0, 255) in int32: the same integers, as
  // the rounded quotient is exact in int32 (|v| <= 255 s up to rounding); 255 by the saturating narrowing
  const __m512 inv = _mm512_set1_ps(1.0f / s);
  const __m512i vzu = _mm512_set1_epi32(*zero), none = _mm512_setzero_si512();
  for (k = 0; k < K; k += 16) {
    const __mmask16 m = tail_mask(K - k);
    __m512 v = _mm512_maskz_loadu_ps(m, row + k);
    if (q.keep) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, q.keep + k));
    const __m512i r = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_mask_storeu_epi8(u + k, m, _mm512_cvtusepi32_epi8(_mm512_max_epi32(_mm512_add_epi32(r, vzu), none)));
  }
  for (int64_t j = 0; j < q.P; ++j) xo[j] = row[q.outlier_index[j]];
}

// The quantized form of M rows of K features: u (M, K) uint8, scale (M,), zu (M,) int32, outliers (M, P).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> empty_quantized(int64_t M, int64_t K, int64_t P,
                                                                           const at::TensorOptions& options) {
  return std::make_tuple(at::empty({M, K}, options.dtype(at::kByte)), at::empty({M}, options.dtype(at::kFloat)),
                         at::empty({M}, options.dtype(at::kInt)), at::empty({M, P}, options.dtype(at::kFloat)));
}

// Where a kernel writes the quantized form of its rows (the tensors of empty_quantized): quantize(row, t, q) puts
// row t's there.
struct QuantizedOutput {
  uint8_t* u;
  float* scale;
  int32_t* zero;
  float* outliers;
  int64_t K;

  explicit QuantizedOutput(const std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>& result)
      : u(std::get<0>(result).data_ptr<uint8_t>()), scale(std::get<1>(result).data_ptr<float>()),
        zero(std::get<2>(result).data_ptr<int32_t>()), outliers(std::get<3>(result).data_ptr<float>()),
        K(std::get<0>(result).size(1)) {}

  void quantize(const float* row, int64_t t, const Quantizer& q) const {
    quantize_row(row, K, q, u + t * K, scale + t, zero + t, outliers + t * q.P);
  }
};

// exp(x) for x <= 0: x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by its Taylor series to r^7 / 7! (relative error
// below 1e-8 on that interval), times 2^n by vscalefps (which goes to 0 for large negative n, as exp does).
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // exp(-104) is 0 in float32
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 in two parts, so that n * ln2_hi is exact
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace
