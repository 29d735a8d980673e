// The fused ops of the training step on the CPU (AVX-512), which ctxemb.modeling.fused_training wraps in autograd
// Functions: dropout + residual add + LayerNorm, LayerNorm + dropout (the embeddings), and the attention
// probabilities' scaled, masked softmax + dropout; each forward and each backward is one pass over rows (in
// parallel), with the math in float32 whatever the dtype of the tensors read and written (float32 or bfloat16).
//
// Dropout masks come from a counter-based hash instead of torch's generator, so no mask is drawn element by element
// and none is stored: element i (the flat index of the element in its tensor, below 2^32) of a call with the 64-bit
// key K (k0 its low 32 bits, k1 its high ones; the caller draws K from torch's generator, which resumed runs restore)
// is kept iff
//
//     h(i) = mix(mix(i ^ k0) ^ k1)  >=  t = floor(p 2^32)        (unsigned 32-bit arithmetic)
//
// where mix is Wellons' "lowbias32" (xorshift 16, multiply 0x7feb352d, xorshift 15, multiply 0x846ca68b, xorshift
// 16: a bijection of 32-bit words with a low avalanche bias); kept elements are scaled by 1 / (1 - p). Two rounds of
// it cost four 32-bit multiplies per 16 elements; ctxemb.modeling.fused_training.counter_hash is the same hash in
// torch ops (the tests' oracle). A backward recomputes the mask from the key.
//
// Compiled on first use by ctxemb.runtime.kernels (torch.utils.cpp_extension) with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mfma, into a library of its own (not the int8 one): it needs no VNNI, and is loaded only where the
// CPU's flags have those instructions.
#include "common.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <vector>

namespace {

using at::BFloat16;
using at::Tensor;

// ---- the counter-based mask ----------------------------------------------------------------------------------
constexpr uint32_t kMix1 = 0x7feb352du, kMix2 = 0x846ca68bu;

inline __m512i mix(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMix1)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMix2)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

// The mask of one call: its key's halves, its threshold and its scale, broadcast.
struct CounterMask {
  __m512i k0, k1, threshold;
  __m512 scale;

  CounterMask(int64_t key, double p) {
    const auto u = static_cast<uint64_t>(key);
    k0 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(u)));
    k1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(u >> 32)));
    // p 2^32 is exact in double (a power of two times p), and the cast truncates: floor, as in the torch reference
    threshold = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(p * 4294967296.0)));
    // the scale is 1 / (1 - p) rounded once to float32, as torch multiplies a float32 tensor by that Python number
    scale = _mm512_set1_ps(static_cast<float>(1.0 / (1.0 - p)));
  }

  // The 16 hashes of elements start .. start + 15 (their indices taken mod 2^32).
  __m512i hash(uint32_t start) const {
    const __m512i i = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(start)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return mix(_mm512_xor_si512(mix(_mm512_xor_si512(i, k0)), k1));
  }

  // Which of elements start .. start + 15 are kept.
  __mmask16 keep(uint32_t start) const { return _mm512_cmpge_epu32_mask(hash(start), threshold); }
};

void check_dropout(double p, int64_t numel) {
  TORCH_CHECK(p >= 0.0 && p < 1.0, "the dropout probability must be in [0, 1), got ", p);
  TORCH_CHECK(numel <= (int64_t{1} << 32), "counter-based dropout numbers elements with 32 bits: a tensor of ", numel,
              " elements is too large");
}

// ---- float32 and bfloat16 rows ---------------------------------------------------------------------------------
inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

inline __m512 load(const BFloat16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }

// Round to nearest even, as torch converts float32 to bfloat16 (NaN to a quiet NaN): the integer form, which needs
// no AVX512-BF16 (whose conversion would also flush subnormals to zero, which torch's does not).
inline void store(BFloat16* p, __m512 v, __mmask16 m) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}

// f(TypedPointer) for a float32 or bfloat16 tensor.
template <typename F>
void with_rows(const Tensor& t, F&& f) {
  if (t.scalar_type() == at::kFloat) {
    f(t.data_ptr<float>());
  } else {
    TORCH_CHECK(t.scalar_type() == at::kBFloat16, "expected float32 or bfloat16, got ", t.scalar_type());
    f(t.data_ptr<BFloat16>());
  }
}

void check_rows(const Tensor& t, int64_t M, int64_t H, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.size(0) == M && t.size(1) == H && t.is_contiguous(), name, " must be a contiguous (",
              M, ", ", H, ") tensor, got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, name,
              " must be float32 or bfloat16, got ", t.scalar_type());
}

void check_vector(const Tensor& t, int64_t H, const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == H && t.is_contiguous() && t.scalar_type() == at::kFloat, name,
              " must be a contiguous float32 (", H, ",) tensor");
}

// Rows per chunk of a LayerNorm backward: each chunk sums its rows' weight and bias gradients apart, and the chunks'
// sums are added in order, so the gradients do not depend on the number of threads.
constexpr int64_t kChunkRows = 32;

// The weight and bias gradients: the chunks' partial sums (chunks, 2, H), added in chunk order.
std::tuple<Tensor, Tensor> sum_chunks(const Tensor& partial, int64_t H) {
  auto gw = at::zeros({H}, partial.options()), gb = at::zeros({H}, partial.options());
  const float* src = partial.data_ptr<float>();
  float *w = gw.data_ptr<float>(), *b = gb.data_ptr<float>();
  for (int64_t c = 0; c < partial.size(0); ++c, src += 2 * H) {
    for (int64_t j = 0; j < H; j += 16) {
      const __mmask16 m = tail_mask(H - j);
      store(w + j, _mm512_add_ps(load(w + j, m), load(src + j, m)), m);
      store(b + j, _mm512_add_ps(load(b + j, m), load(src + H + j, m)), m);
    }
  }
  return {gw, gb};
}

// A thread's scratch for the rows of a LayerNorm backward: the normalized row, a row of gradients, its keep masks.
struct RowScratch {
  explicit RowScratch(int64_t H) : xh(H), g(H), keeps((H + 15) / 16) {}
  std::vector<float> xh, g;
  std::vector<__mmask16> keeps;
};

// The rows of a LayerNorm backward, in chunks of kChunkRows run in parallel: row(r, pw, scratch) writes row r's
// input gradients and adds its weight and bias gradients to its chunk's partial sums (pw, pw + H). Returns the
// weight and bias gradients (sum_chunks).
template <typename Row>
std::tuple<Tensor, Tensor> backward_rows(int64_t M, int64_t H, const at::TensorOptions& options, const Row& row) {
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  auto partial = at::zeros({chunks, 2, H}, options);
  float* sums = partial.data_ptr<float>();
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    RowScratch scratch(H);
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t r = c * kChunkRows; r < std::min(M, (c + 1) * kChunkRows); ++r) row(r, sums + c * 2 * H, scratch);
  });
  return sum_chunks(partial, H);
}

// One row's LayerNorm backward, given dy (the gradient of the normalized row before the affine map's weight: the
// caller's gradient times the weight) and x_hat: ds = rstd (dy w - mean(dy w) - x_hat mean(dy w x_hat)) over the
// row, written by `out(j, ds, mask)`. g holds the H gradients of the output, xh the H normalized values.
template <typename Out>
inline void layer_norm_row_backward(const float* g, const float* xh, const float* w, float rstd, int64_t H,
                                    Out&& out) {
  __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = tail_mask(H - j);
    const __m512 gw = _mm512_mul_ps(load(g + j, m), load(w + j, m));
    a = _mm512_add_ps(a, gw);
    b = _mm512_fmadd_ps(gw, load(xh + j, m), b);
  }
  const __m512 ma = _mm512_set1_ps(_mm512_reduce_add_ps(a) / H), mb = _mm512_set1_ps(_mm512_reduce_add_ps(b) / H);
  const __m512 rs = _mm512_set1_ps(rstd);
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = tail_mask(H - j);
    const __m512 gw = _mm512_mul_ps(load(g + j, m), load(w + j, m));
    out(j, _mm512_mul_ps(rs, _mm512_fnmadd_ps(load(xh + j, m), mb, _mm512_sub_ps(gw, ma))), m);
  }
}

// Accumulate one row's weight and bias gradients (g x_hat and g) into a chunk's partial sums pw, pb.
inline void accumulate_affine(const float* g, const float* xh, int64_t H, float* pw, float* pb) {
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = tail_mask(H - j);
    const __m512 gv = load(g + j, m);
    store(pw + j, _mm512_fmadd_ps(gv, load(xh + j, m), load(pw + j, m)), m);
    store(pb + j, _mm512_add_ps(gv, load(pb + j, m)), m);
  }
}

// Mean and 1 / sqrt(variance + eps) of a float32 row (two passes: no cancellation of a large mean).
inline std::pair<float, float> moments(const float* s, int64_t H, float eps) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < H; j += 16) acc = _mm512_add_ps(acc, load(s + j, tail_mask(H - j)));
  const float mean = _mm512_reduce_add_ps(acc) / H;
  const __m512 mu = _mm512_set1_ps(mean);
  acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < H; j += 16) {
    const __mmask16 m = tail_mask(H - j);
    const __m512 d = _mm512_maskz_sub_ps(m, load(s + j, m), mu);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  return {mean, 1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / H + eps)};
}

// ---- dropout + residual add + LayerNorm ------------------------------------------------------------------------
// y = LayerNorm(residual + dropout(x)): x, residual (M, H) float32 or bfloat16, weight and bias (H,) float32; y
// (M, H) float32, and the rows' mean and rstd (M,); with keep_sum also s = residual + dropout(x) (M, H) float32 for
// the backward (else an empty tensor: the backward recomputes s from x, residual and the key).
std::tuple<Tensor, Tensor, Tensor, Tensor> dropout_add_layer_norm(const Tensor& x, const Tensor& residual,
                                                                  const Tensor& weight, const Tensor& bias,
                                                                  double eps, double p, int64_t key, bool keep_sum) {
  const int64_t M = x.size(0), H = x.size(1);
  check_rows(x, M, H, "x");
  check_rows(residual, M, H, "residual");
  check_vector(weight, H, "weight");
  check_vector(bias, H, "bias");
  check_dropout(p, x.numel());
  const auto f32 = x.options().dtype(at::kFloat);
  auto y = at::empty({M, H}, f32), mean = at::empty({M}, f32), rstd = at::empty({M}, f32);
  auto sum = keep_sum ? at::empty({M, H}, f32) : at::empty({0}, f32);
  const CounterMask cm(key, p);
  const float *w = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
  float *py = y.data_ptr<float>(), *pm = mean.data_ptr<float>(), *pr = rstd.data_ptr<float>();
  float* ps = keep_sum ? sum.data_ptr<float>() : nullptr;
  with_rows(x, [&](auto* px) {
    with_rows(residual, [&](auto* pres) {
      at::parallel_for(0, M, std::max<int64_t>(1, 4096 / H), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t o = r * H;
          float* yr = py + o;  // s first, y in place of it last
          for (int64_t j = 0; j < H; j += 16) {
            const __mmask16 m = tail_mask(H - j);
            const __mmask16 keep = cm.keep(static_cast<uint32_t>(o + j)) & m;
            const __m512 s = _mm512_add_ps(load(pres + o + j, m), _mm512_maskz_mul_ps(keep, load(px + o + j, m),
                                                                                       cm.scale));
            store(yr + j, s, m);
            if (ps) store(ps + o + j, s, m);
          }
          const auto [mu, rs] = moments(yr, H, static_cast<float>(eps));
          const __m512 vmu = _mm512_set1_ps(mu), vrs = _mm512_set1_ps(rs);
          for (int64_t j = 0; j < H; j += 16) {
            const __mmask16 m = tail_mask(H - j);
            const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(load(yr + j, m), vmu), vrs);
            store(yr + j, _mm512_fmadd_ps(xh, load(w + j, m), load(b + j, m)), m);
          }
          pm[r] = mu;
          pr[r] = rs;
        }
      });
    });
  });
  return {y, mean, rstd, sum};
}

// The gradients of dropout_add_layer_norm: grad_y (M, H) float32; s (M, H) float32 from the forward, or empty to
// recompute it from x and residual (which are then needed; else only their dtypes are read); x_dtype and
// residual_dtype say what the gradients are written in. Returns grad_x, grad_residual, grad_weight, grad_bias.
std::tuple<Tensor, Tensor, Tensor, Tensor> dropout_add_layer_norm_backward(
    const Tensor& grad_y, const Tensor& sum, const Tensor& x, const Tensor& residual, const Tensor& mean,
    const Tensor& rstd, const Tensor& weight, double p, int64_t key) {
  const int64_t M = grad_y.size(0), H = grad_y.size(1);
  TORCH_CHECK(grad_y.scalar_type() == at::kFloat, "grad_y must be float32");
  check_rows(grad_y, M, H, "grad_y");
  const bool recompute = sum.numel() == 0;
  if (recompute) {
    check_rows(x, M, H, "x");
    check_rows(residual, M, H, "residual");
  } else {
    check_rows(sum, M, H, "sum");
  }
  check_vector(weight, H, "weight");
  check_dropout(p, grad_y.numel());
  const CounterMask cm(key, p);
  auto grad_x = at::empty({M, H}, grad_y.options().dtype(x.scalar_type()));
  auto grad_res = at::empty({M, H}, grad_y.options().dtype(residual.scalar_type()));
  const float *dy = grad_y.data_ptr<float>(), *w = weight.data_ptr<float>();
  const float *pm = mean.data_ptr<float>(), *pr = rstd.data_ptr<float>();
  const float* ps = recompute ? nullptr : sum.data_ptr<float>();
  std::tuple<Tensor, Tensor> affine;
  with_rows(grad_x, [&](auto* gx) {
    with_rows(grad_res, [&](auto* gr) {
      using TX = std::remove_pointer_t<decltype(gx)>;
      using TR = std::remove_pointer_t<decltype(gr)>;
      // recomputing s reads x and residual in their own dtypes (those of their gradients)
      const TX* px = recompute ? x.data_ptr<TX>() : nullptr;
      const TR* pres = recompute ? residual.data_ptr<TR>() : nullptr;
      affine = backward_rows(M, H, grad_y.options(), [&](int64_t r, float* pw, RowScratch& t) {
        const int64_t o = r * H;
        const __m512 mu = _mm512_set1_ps(pm[r]), rs = _mm512_set1_ps(pr[r]);
        for (int64_t j = 0; j < H; j += 16) {
          const __mmask16 m = tail_mask(H - j);
          const __mmask16 keep = t.keeps[j / 16] = cm.keep(static_cast<uint32_t>(o + j)) & m;
          const __m512 s = ps ? load(ps + o + j, m)
                              : _mm512_add_ps(load(pres + o + j, m),
                                              _mm512_maskz_mul_ps(keep, load(px + o + j, m), cm.scale));
          store(t.xh.data() + j, _mm512_mul_ps(_mm512_sub_ps(s, mu), rs), m);
        }
        accumulate_affine(dy + o, t.xh.data(), H, pw, pw + H);
        layer_norm_row_backward(dy + o, t.xh.data(), w, pr[r], H, [&](int64_t j, __m512 ds, __mmask16 m) {
          store(gr + o + j, ds, m);
          store(gx + o + j, _mm512_maskz_mul_ps(t.keeps[j / 16], ds, cm.scale), m);
        });
      });
    });
  });
  auto [gw, gb] = affine;
  return {grad_x, grad_res, gw, gb};
}

// ---- LayerNorm + dropout (the embeddings) -----------------------------------------------------------------------
// y = dropout(LayerNorm(x)): x (M, H) float32 or bfloat16, weight and bias (H,) float32; y (M, H) float32 and the
// rows' mean and rstd (M,).
std::tuple<Tensor, Tensor, Tensor> layer_norm_dropout(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                      double eps, double p, int64_t key) {
  const int64_t M = x.size(0), H = x.size(1);
  check_rows(x, M, H, "x");
  check_vector(weight, H, "weight");
  check_vector(bias, H, "bias");
  check_dropout(p, x.numel());
  const auto f32 = x.options().dtype(at::kFloat);
  auto y = at::empty({M, H}, f32), mean = at::empty({M}, f32), rstd = at::empty({M}, f32);
  const CounterMask cm(key, p);
  const float *w = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
  float *py = y.data_ptr<float>(), *pm = mean.data_ptr<float>(), *pr = rstd.data_ptr<float>();
  with_rows(x, [&](auto* px) {
    at::parallel_for(0, M, std::max<int64_t>(1, 4096 / H), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r * H;
        float* yr = py + o;
        for (int64_t j = 0; j < H; j += 16) {
          const __mmask16 m = tail_mask(H - j);
          store(yr + j, load(px + o + j, m), m);
        }
        const auto [mu, rs] = moments(yr, H, static_cast<float>(eps));
        const __m512 vmu = _mm512_set1_ps(mu), vrs = _mm512_set1_ps(rs);
        for (int64_t j = 0; j < H; j += 16) {
          const __mmask16 m = tail_mask(H - j);
          const __mmask16 keep = cm.keep(static_cast<uint32_t>(o + j)) & m;
          const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(load(yr + j, m), vmu), vrs);
          store(yr + j, _mm512_maskz_mul_ps(keep, _mm512_fmadd_ps(xh, load(w + j, m), load(b + j, m)), cm.scale), m);
        }
        pm[r] = mu;
        pr[r] = rs;
      }
    });
  });
  return {y, mean, rstd};
}

// The gradients of layer_norm_dropout: grad_y (M, H) float32, x as in the forward. Returns grad_x (x's dtype),
// grad_weight, grad_bias.
std::tuple<Tensor, Tensor, Tensor> layer_norm_dropout_backward(const Tensor& grad_y, const Tensor& x,
                                                               const Tensor& mean, const Tensor& rstd,
                                                               const Tensor& weight, double p, int64_t key) {
  const int64_t M = grad_y.size(0), H = grad_y.size(1);
  TORCH_CHECK(grad_y.scalar_type() == at::kFloat, "grad_y must be float32");
  check_rows(grad_y, M, H, "grad_y");
  check_rows(x, M, H, "x");
  check_vector(weight, H, "weight");
  check_dropout(p, x.numel());
  const CounterMask cm(key, p);
  auto grad_x = at::empty({M, H}, x.options());
  const float *dy = grad_y.data_ptr<float>(), *w = weight.data_ptr<float>();
  const float *pm = mean.data_ptr<float>(), *pr = rstd.data_ptr<float>();
  std::tuple<Tensor, Tensor> affine;
  with_rows(x, [&](auto* px) {
    auto* gx = grad_x.data_ptr<std::remove_const_t<std::remove_pointer_t<decltype(px)>>>();
    affine = backward_rows(M, H, grad_y.options(), [&](int64_t r, float* pw, RowScratch& t) {
      const int64_t o = r * H;
      const __m512 mu = _mm512_set1_ps(pm[r]), rs = _mm512_set1_ps(pr[r]);
      for (int64_t j = 0; j < H; j += 16) {
        const __mmask16 m = tail_mask(H - j);
        const __mmask16 keep = cm.keep(static_cast<uint32_t>(o + j)) & m;
        store(t.g.data() + j, _mm512_maskz_mul_ps(keep, load(dy + o + j, m), cm.scale), m);
        store(t.xh.data() + j, _mm512_mul_ps(_mm512_sub_ps(load(px + o + j, m), mu), rs), m);
      }
      accumulate_affine(t.g.data(), t.xh.data(), H, pw, pw + H);
      layer_norm_row_backward(t.g.data(), t.xh.data(), w, pr[r], H,
                              [&](int64_t j, __m512 ds, __mmask16 m) { store(gx + o + j, ds, m); });
    });
  });
  auto [gw, gb] = affine;
  return {grad_x, gw, gb};
}

// ---- attention probabilities: softmax(scores * scale + mask), then dropout ---------------------------------------
// scores (B, N, Tq, Tk) contiguous, float32 or bfloat16 (the q k^T product); mask additive float32, broadcastable to
// scores (or None). Returns the probabilities and the dropped-out probabilities, both in scores' dtype. A row whose
// every score is -inf gets probabilities 0 (as scaled_dot_product_attention's softmax does).
std::tuple<Tensor, Tensor> softmax_dropout(const Tensor& scores, const c10::optional<Tensor>& mask, double scale,
                                           double p, int64_t key) {
  TORCH_CHECK(scores.dim() == 4 && scores.is_contiguous(), "scores must be a contiguous (B, N, Tq, Tk) tensor");
  const int64_t N = scores.size(1), Tq = scores.size(2), Tk = scores.size(3);
  const int64_t R = scores.numel() / std::max<int64_t>(Tk, 1);
  check_dropout(p, scores.numel());
  Tensor m4;
  if (mask.has_value()) {
    TORCH_CHECK(mask->scalar_type() == at::kFloat, "mask must be float32");
    m4 = mask->expand(scores.sizes());
    if (m4.stride(3) != 1) m4 = m4.contiguous();
  }
  auto probs = at::empty_like(scores), dropped = at::empty_like(scores);
  const CounterMask cm(key, p);
  const __m512 vscale = _mm512_set1_ps(static_cast<float>(scale));
  const float* pmask = m4.defined() ? m4.data_ptr<float>() : nullptr;
  const int64_t sb = m4.defined() ? m4.stride(0) : 0, sn = m4.defined() ? m4.stride(1) : 0;
  const int64_t sq = m4.defined() ? m4.stride(2) : 0;
  with_rows(scores, [&](auto* ps) {
    using TS = std::remove_const_t<std::remove_pointer_t<decltype(ps)>>;
    TS *pp = probs.data_ptr<TS>(), *pd = dropped.data_ptr<TS>();
    at::parallel_for(0, R, std::max<int64_t>(1, 4096 / std::max<int64_t>(Tk, 1)), [&](int64_t begin, int64_t end) {
      std::vector<float> e(Tk);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r * Tk;
        const float* mk = pmask ? pmask + (r / (N * Tq)) * sb + ((r / Tq) % N) * sn + (r % Tq) * sq : nullptr;
        __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (int64_t j = 0; j < Tk; j += 16) {
          const __mmask16 m = tail_mask(Tk - j);
          __m512 s = _mm512_mul_ps(load(ps + o + j, m), vscale);
          if (mk) s = _mm512_add_ps(s, load(mk + j, m));
          store(e.data() + j, s, m);
          vmax = _mm512_mask_max_ps(vmax, m, vmax, s);
        }
        const float rmax = _mm512_reduce_max_ps(vmax);
        if (rmax == -std::numeric_limits<float>::infinity()) {
          for (int64_t j = 0; j < Tk; j += 16) {
            const __mmask16 m = tail_mask(Tk - j);
            store(pp + o + j, _mm512_setzero_ps(), m);
            store(pd + o + j, _mm512_setzero_ps(), m);
          }
          continue;
        }
        const __m512 mx = _mm512_set1_ps(rmax);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < Tk; j += 16) {
          const __mmask16 m = tail_mask(Tk - j);
          const __m512 v = _mm512_maskz_mov_ps(m, exp_nonpositive(_mm512_sub_ps(load(e.data() + j, m), mx)));
          store(e.data() + j, v, m);
          acc = _mm512_add_ps(acc, v);
        }
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(acc));
        for (int64_t j = 0; j < Tk; j += 16) {
          const __mmask16 m = tail_mask(Tk - j);
          const __m512 pr = _mm512_mul_ps(load(e.data() + j, m), inv);
          store(pp + o + j, pr, m);
          store(pd + o + j, _mm512_maskz_mul_ps(cm.keep(static_cast<uint32_t>(o + j)), pr, cm.scale), m);
        }
      }
    });
  });
  return {probs, dropped};
}

// The gradient of the scores (the raw q k^T product, so times scale) from the gradient of the dropped-out
// probabilities: g = dropout(grad_dropped), grad = scale P (g - sum(P g)) over each row. grad_dropped and probs
// (B, N, Tq, Tk) contiguous, of one dtype, which the result has too.
Tensor softmax_dropout_backward(const Tensor& grad_dropped, const Tensor& probs, double scale, double p, int64_t key) {
  TORCH_CHECK(probs.dim() == 4 && probs.is_contiguous() && grad_dropped.is_contiguous() &&
                  grad_dropped.sizes() == probs.sizes() && grad_dropped.scalar_type() == probs.scalar_type(),
              "grad_dropped and probs must be contiguous (B, N, Tq, Tk) tensors of one dtype");
  const int64_t Tk = probs.size(3), R = probs.numel() / std::max<int64_t>(Tk, 1);
  check_dropout(p, probs.numel());
  auto grad = at::empty_like(probs);
  const CounterMask cm(key, p);
  const __m512 vscale = _mm512_set1_ps(static_cast<float>(scale));
  with_rows(probs, [&](auto* pp) {
    using TS = std::remove_const_t<std::remove_pointer_t<decltype(pp)>>;
    const TS* pg = grad_dropped.data_ptr<TS>();
    TS* out = grad.data_ptr<TS>();
    at::parallel_for(0, R, std::max<int64_t>(1, 4096 / std::max<int64_t>(Tk, 1)), [&](int64_t begin, int64_t end) {
      std::vector<float> g(Tk);
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r * Tk;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < Tk; j += 16) {
          const __mmask16 m = tail_mask(Tk - j);
          const __m512 gv = _mm512_maskz_mul_ps(cm.keep(static_cast<uint32_t>(o + j)) & m, load(pg + o + j, m),
                                                cm.scale);
          store(g.data() + j, gv, m);
          acc = _mm512_fmadd_ps(load(pp + o + j, m), gv, acc);
        }
        const __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(acc));
        for (int64_t j = 0; j < Tk; j += 16) {
          const __mmask16 m = tail_mask(Tk - j);
          const __m512 d = _mm512_mul_ps(load(pp + o + j, m), _mm512_sub_ps(load(g.data() + j, m), dot));
          store(out + o + j, _mm512_mul_ps(d, vscale), m);
        }
      }
    });
  });
  return grad;
}

// ---- the masks alone (for tests and checks) ---------------------------------------------------------------------
// The hashes h(start .. start + n - 1) of key, as int64 in [0, 2^32).
Tensor counter_hash(int64_t key, int64_t start, int64_t n) {
  TORCH_CHECK(n >= 0 && start >= 0 && start + n <= (int64_t{1} << 32), "counter_hash numbers elements with 32 bits");
  auto out = at::empty({n}, at::TensorOptions().dtype(at::kLong));
  int64_t* po = out.data_ptr<int64_t>();
  const CounterMask cm(key, 0.0);
  alignas(64) uint32_t h[16];
  for (int64_t j = 0; j < n; j += 16) {
    _mm512_store_si512(h, cm.hash(static_cast<uint32_t>(start + j)));
    for (int64_t l = 0; l < std::min<int64_t>(16, n - j); ++l) po[j + l] = h[l];
  }
  return out;
}

// Which of the first n elements a call with key and p keeps (bool), by the kernels' own comparison.
Tensor dropout_keep(int64_t key, int64_t n, double p) {
  check_dropout(p, n);
  auto out = at::empty({n}, at::TensorOptions().dtype(at::kBool));
  bool* po = out.data_ptr<bool>();
  const CounterMask cm(key, p);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 keep = cm.keep(static_cast<uint32_t>(j));
    for (int64_t l = 0; l < std::min<int64_t>(16, n - j); ++l) po[j + l] = (keep >> l) & 1;
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(ctxemb_train, m) {
  m.def("counter_hash(int key, int start, int n) -> Tensor", &counter_hash);
  m.def("dropout_keep(int key, int n, float p) -> Tensor", &dropout_keep);
  m.def("dropout_add_layer_norm(Tensor x, Tensor residual, Tensor weight, Tensor bias, float eps, float p, int key, "
        "bool keep_sum) -> (Tensor, Tensor, Tensor, Tensor)", &dropout_add_layer_norm);
  m.def("dropout_add_layer_norm_backward(Tensor grad_y, Tensor sum, Tensor x, Tensor residual, Tensor mean, "
        "Tensor rstd, Tensor weight, float p, int key) -> (Tensor, Tensor, Tensor, Tensor)",
        &dropout_add_layer_norm_backward);
  m.def("layer_norm_dropout(Tensor x, Tensor weight, Tensor bias, float eps, float p, int key) "
        "-> (Tensor, Tensor, Tensor)", &layer_norm_dropout);
  m.def("layer_norm_dropout_backward(Tensor grad_y, Tensor x, Tensor mean, Tensor rstd, Tensor weight, float p, "
        "int key) -> (Tensor, Tensor, Tensor)", &layer_norm_dropout_backward);
  m.def("softmax_dropout(Tensor scores, Tensor? mask, float scale, float p, int key) -> (Tensor, Tensor)",
        &softmax_dropout);
  m.def("softmax_dropout_backward(Tensor grad_dropped, Tensor probs, float scale, float p, int key) -> Tensor",
        &softmax_dropout_backward);
}
