// Self-attention of the int8 path on AVX-512 CPUs: softmax(q k^T / sqrt(D) + mask) v for every head of a batch, read
// straight from the Q/K/V product's (B*T, 3H) output (no permute or copy of q, k, v), with the softmax between the two
// products on rows held in L1, and the (B*T, H) result written token by token in the layout the attention output
// Linear reads: in float32, or already quantized for that Linear (quantize_row of common.h), so the float32 result
// never leaves a per-thread scratch. Compiled into ctxemb.runtime.kernels' library with int8_vnni.cpp.
//
// The two products run in float32 (FMA) or with bfloat16 operands and float32 sums (vdpbf16ps: two products per
// lane and instruction, where FMA does one); the caller chooses, from the CPU's flags (the bf16 functions carry
// their own target attribute, so the library loads on AVX-512 CPUs without AVX512-BF16). The scaling, the mask, the
// softmax and the sums are float32 either way. For the bf16 products, q/k/v may come as bfloat16 (the Q/K/V
// product's linear_bf16): the same operands as rounding float32 ones here, half the bytes to read.
//
// The sequences are B x T rows (padding masked), or packed one after another at given offsets, each of its own length
// (no padding rows, no mask: what the int8 encoder's unpadded batches give).
//
// Per task (one sequence b and up to kQueryBlock of its query rows) and head h: k transposed to (D, Tp) floats (Tp: T
// rounded up to 16), or to (D/2, Tp) pairs of bf16, by 16 x 16 transposes in registers, so that a micro-tile of up to
// 6 query rows x 64 keys is a run of broadcast-FMAs (the int8 kernel's tile, in float), whose scores are scaled,
// masked and their running row maximum taken while still in registers; then each row exponentiated in place
// (exp_nonpositive after subtracting the row's maximum; masked keys exactly 0), and p v in tiles of 6 rows x 64
// features, read from v's rows in place (float32) or from v packed as pairs of keys (bf16), scaled by 1 / sum.
#include "common.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <type_traits>
#include <vector>

namespace {

#define CTXEMB_BF16 __attribute__((target("avx512bf16")))

constexpr int kTileRows = 6;         // query rows of a micro-tile
constexpr int kTileVectors = 4;      // 16-lane vectors of a micro-tile: keys (q k^T) or head features (p v)
constexpr int64_t kQueryBlock = 64;  // query rows of a task: a task packs each head's k (and v) once for them

struct Problem {
  const float* qkv;          // (B*T, 3H): q of head h at columns [h D, h D + D), k at H + h D, v at 2H + h D
  const uint16_t* qkv16;     // or the same in bfloat16 (then qkv is null; bf16 products only)
  int64_t B, T, N, D, H, Tp;  // Tp: T rounded up to 16
  const float* mask;         // additive; element strides of its expansion to (B, N, T, T) (keys 1 apart); null: none
  int64_t mb, mn, mi;
  at::Tensor mask_copy;      // the expanded mask, where the caller's did not have its keys 1 apart
  float scale;               // 1 / sqrt(D)
  const int64_t* offsets;    // packed sequences (no padding rows): sequence b is rows [offsets[b], offsets[b + 1]),
                             // T its longest; null: B sequences of T rows each

  int64_t first_row(int64_t b) const { return offsets ? offsets[b] : b * T; }
  int64_t length(int64_t b) const { return offsets ? offsets[b + 1] - offsets[b] : T; }
  // Sequence b alone, as a problem of one sequence of its own length (the functions below then take b = 0).
  Problem sequence(int64_t b) const {
    Problem S = *this;
    S.T = length(b);
    S.Tp = (S.T + 15) / 16 * 16;
    if (qkv) S.qkv = qkv + first_row(b) * 3 * H;
    if (qkv16) S.qkv16 = qkv16 + first_row(b) * 3 * H;
    S.B = 1;
    S.offsets = nullptr;
    return S;
  }

  const float* row(int64_t b, int64_t t) const { return qkv + (b * T + t) * 3 * H; }
  const uint16_t* row16(int64_t b, int64_t t) const { return qkv16 + (b * T + t) * 3 * H; }
  const float* mask_row(int64_t b, int64_t h, int64_t i) const {
    return mask ? mask + b * mb + h * mn + i * mi : nullptr;
  }
};

// Calls f(integral_constant<R>, integral_constant<V>) for 1 <= rows <= 6, 1 <= vectors <= 4: one micro-tile shape.
template <int R, typename F>
inline void with_vectors(int64_t vectors, F&& f) {
  switch (vectors) {
    case 1: f(std::integral_constant<int, R>{}, std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, R>{}, std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, R>{}, std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, R>{}, std::integral_constant<int, 4>{}); break;
  }
}

template <typename F>
inline void with_tile(int64_t rows, int64_t vectors, F&& f) {
  switch (rows) {
    case 1: with_vectors<1>(vectors, f); break;
    case 2: with_vectors<2>(vectors, f); break;
    case 3: with_vectors<3>(vectors, f); break;
    case 4: with_vectors<4>(vectors, f); break;
    case 5: with_vectors<5>(vectors, f); break;
    default: with_vectors<6>(vectors, f); break;
  }
}

// f(R, V, r0, v0) for every micro-tile (rows r0.. of a group of R <= 6, vectors v0.. of a group of V <= 4) of a
// rows x vectors problem, R and V as integral constants.
template <typename F>
inline void tiles(int64_t rows, int64_t vectors, F&& f) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows)
    for (int64_t v0 = 0; v0 < vectors; v0 += kTileVectors)
      with_tile(std::min<int64_t>(kTileRows, rows - r0), std::min<int64_t>(kTileVectors, vectors - v0),
                [&](auto R, auto V) { f(R, V, r0, v0); });
}

// ---- packing -------------------------------------------------------------------------------------------------------
// 16 rows of 16 32-bit elements transposed in registers (r[i] lane c becomes r[c] lane i): pairs of rows interleaved
// by elements, then by 64-bit pairs (r[4g + k]'s 128-bit lane L then holds column 4L + k of rows 4g..4g+3), then a
// 4 x 4 transpose of 128-bit lanes for each k. Bitwise moves only: bf16 pairs go through it unchanged.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 x0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88), x1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xDD);
    const __m512 y0 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    const __m512 y1 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xDD);
    t[k] = _mm512_shuffle_f32x4(x0, y0, 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(x1, y1, 0x88);
    t[8 + k] = _mm512_shuffle_f32x4(x0, y0, 0xDD);
    t[12 + k] = _mm512_shuffle_f32x4(x1, y1, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// k of head h transposed: kt[d * Tp + j] = k[j, d], keys T..Tp-1 zero.
inline void pack_k_f32(const Problem& P, int64_t b, int64_t h, float* kt) {
  const float* k = P.row(b, 0) + P.H + h * P.D;
  __m512 r[16];
  for (int64_t j0 = 0; j0 < P.Tp; j0 += 16)
    for (int64_t d0 = 0; d0 < P.D; d0 += 16) {
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < P.T ? _mm512_loadu_ps(k + (j0 + i) * 3 * P.H + d0) : _mm512_setzero_ps();
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_ps(kt + (d0 + c) * P.Tp + j0, r[c]);
    }
}

// 16 floats -> 16 bf16 (round to nearest even) at dst.
CTXEMB_BF16 inline void store_bf16(uint16_t* dst, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(x));
}

// 32 floats (lo, then hi) -> 32 bf16 in order, i.e. 16 pairs (lo0, lo1), ..., (hi14, hi15) as 32-bit words.
CTXEMB_BF16 inline __m512 pairs_bf16(__m512 lo, __m512 hi) {
  return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// Interleaves a and b: 16 pairs (a0, b0), ..., (a15, b15) of bf16 as 32-bit words.
CTXEMB_BF16 inline __m512i interleave_bf16(__m512 a, __m512 b) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// k of head h as pairs kb[s * Tp + j] = (k[j, 2s], k[j, 2s + 1]) in bf16 (vdpbf16ps's operand layout), keys T..Tp-1
// zero: each key's row converted to pairs, 16 keys x 16 pairs transposed in registers.
// From bfloat16 q/k/v (P.qkv16) a key's 32 features are already its 16 pairs in that layout: no conversion.
CTXEMB_BF16 inline void pack_k_bf16(const Problem& P, int64_t b, int64_t h, uint32_t* kb) {
  __m512 r[16];
  for (int64_t j0 = 0; j0 < P.Tp; j0 += 16)
    for (int64_t d0 = 0; d0 < P.D; d0 += 32) {
      const bool full = d0 + 32 <= P.D;  // else 16 features left: 8 pairs
      for (int i = 0; i < 16; ++i) {
        r[i] = _mm512_setzero_ps();
        if (j0 + i >= P.T) continue;
        if (P.qkv16) {
          const uint16_t* x = P.row16(b, j0 + i) + P.H + h * P.D + d0;
          r[i] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(full ? 0xFFFFFFFFu : 0xFFFFu, x));
          continue;
        }
        const float* x = P.row(b, j0 + i) + P.H + h * P.D + d0;
        r[i] = pairs_bf16(_mm512_loadu_ps(x), full ? _mm512_loadu_ps(x + 16) : _mm512_setzero_ps());
      }
      transpose16(r);
      for (int c = 0; c < (full ? 16 : 8); ++c)
        _mm512_storeu_ps(reinterpret_cast<float*>(kb + (d0 / 2 + c) * P.Tp + j0), r[c]);
    }
}

// v of head h as pairs of keys vb[s * D + d] = (v[2s, d], v[2s + 1, d]) in bf16, for s < ceil(T / 2) (a key T, if T
// is odd, zero).
CTXEMB_BF16 inline void pack_v_bf16(const Problem& P, int64_t b, int64_t h, uint32_t* vb) {
  if (P.qkv16) {  // 16 features of two keys' rows interleaved by one 16-bit permute
    const __m512i order = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                           39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    for (int64_t s = 0; 2 * s < P.T; ++s) {
      const uint16_t* v0 = P.row16(b, 2 * s) + 2 * P.H + h * P.D;
      const uint16_t* v1 = 2 * s + 1 < P.T ? P.row16(b, 2 * s + 1) + 2 * P.H + h * P.D : nullptr;
      for (int64_t d = 0; d < P.D; d += 16) {
        const __m512i a = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + d)));
        const __m512i c = v1 ? _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + d)))
                             : _mm512_setzero_si512();
        _mm512_storeu_si512(vb + s * P.D + d, _mm512_permutex2var_epi16(a, order, c));
      }
    }
    return;
  }
  for (int64_t s = 0; 2 * s < P.T; ++s) {
    const float* v0 = P.row(b, 2 * s) + 2 * P.H + h * P.D;
    const float* v1 = 2 * s + 1 < P.T ? P.row(b, 2 * s + 1) + 2 * P.H + h * P.D : nullptr;
    for (int64_t d = 0; d < P.D; d += 16)
      _mm512_storeu_si512(vb + s * P.D + d, interleave_bf16(_mm512_loadu_ps(v0 + d),
                                                            v1 ? _mm512_loadu_ps(v1 + d) : _mm512_setzero_ps()));
  }
}

// ---- the scores and the softmax ------------------------------------------------------------------------------------
// A micro-tile's scores (R query rows from row i, 16 V keys from key j0) in registers, finished: times the scale, plus
// the mask, keys from T on -infinity; stored to s (rows Tp apart), their maximum taken into top (16 lanes per row,
// set by a row's first tile).
template <int R, int V>
inline void finish_scores(__m512 (&acc)[R][V], const Problem& P, int64_t b, int64_t h, int64_t i, int64_t j0,
                          float* s, float* top) {
  const __m512 scale = _mm512_set1_ps(P.scale), lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int r = 0; r < R; ++r) {
    const float* mask = P.mask_row(b, h, i + r);
    __m512 high = j0 == 0 ? lowest : _mm512_loadu_ps(top + 16 * r);
    for (int v = 0; v < V; ++v) {
      const __mmask16 m = tail_mask(P.T - j0 - 16 * v);
      __m512 x = _mm512_mul_ps(acc[r][v], scale);
      if (mask) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, mask + j0 + 16 * v));
      x = _mm512_mask_blend_ps(m, lowest, x);
      _mm512_storeu_ps(s + r * P.Tp + 16 * v, x);
      high = _mm512_max_ps(high, x);
    }
    _mm512_storeu_ps(top + 16 * r, high);
  }
}

// Each of `rows` finished score rows (Tp apart) in place: exp(s - the row's maximum), exactly 0 where s lies more than
// 104 below it (exp underflows: every masked key, and the keys from T on). inv[r] = 1 / the row's sum.
inline void softmax_rows(const Problem& P, int64_t rows, float* s, const float* top, float* inv) {
  const __m512 floor = _mm512_set1_ps(-104.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * P.Tp;
    const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_loadu_ps(top + 16 * r)));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j0 = 0; j0 < P.Tp; j0 += 16) {
      const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(row + j0), max);
      const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, floor, _CMP_GT_OQ), exp_nonpositive(x));
      _mm512_storeu_ps(row + j0, e);
      sum = _mm512_add_ps(sum, e);
    }
    inv[r] = 1.0f / _mm512_reduce_add_ps(sum);
  }
}

// ---- the micro-tiles -----------------------------------------------------------------------------------------------
// Scores of R query rows (q rows 3H apart) x 16 V keys (kt: k transposed, rows Tp apart), float32.
template <int R, int V>
inline void qk_tile_f32(const Problem& P, int64_t b, int64_t h, int64_t i, int64_t j0, const float* q, const float* kt,
                        float* s, float* top) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t d = 0; d < P.D; ++d) {
    __m512 w[V];
    for (int v = 0; v < V; ++v) w[v] = _mm512_loadu_ps(kt + d * P.Tp + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(q[r * 3 * P.H + d]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(x, w[v], acc[r][v]);
    }
  }
  finish_scores<R, V>(acc, P, b, h, i, j0, s, top);
}

// The same from q and k as pairs of bf16 (q: D/2 pairs per row, rows ldq pairs apart; kb as pack_k_bf16 leaves it).
template <int R, int V>
CTXEMB_BF16 inline void qk_tile_bf16(const Problem& P, int64_t b, int64_t h, int64_t i, int64_t j0, const uint32_t* q,
                                     int64_t ldq, const uint32_t* kb, float* s, float* top) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  const int64_t pairs = P.D / 2;
  for (int64_t t = 0; t < pairs; ++t) {
    __m512i w[V];
    for (int v = 0; v < V; ++v) w[v] = _mm512_loadu_si512(kb + t * P.Tp + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(q[r * ldq + t]));
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)x, (__m512bh)w[v]);
    }
  }
  finish_scores<R, V>(acc, P, b, h, i, j0, s, top);
}

// out[r, :16 V] = inv[r] sum_j p[r, j] v[j, :16 V] for R rows (p rows Tp apart), v read in place (rows 3H apart).
template <int R, int V>
inline void pv_tile_f32(const Problem& P, const float* p, const float* v, const float* inv, float* out) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < V; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < P.T; ++j) {
    __m512 w[V];
    for (int c = 0; c < V; ++c) w[c] = _mm512_loadu_ps(v + j * 3 * P.H + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(p[r * P.Tp + j]);
      for (int c = 0; c < V; ++c) acc[r][c] = _mm512_fmadd_ps(x, w[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 scale = _mm512_set1_ps(inv[r]);
    for (int c = 0; c < V; ++c) _mm512_storeu_ps(out + r * P.H + 16 * c, _mm512_mul_ps(acc[r][c], scale));
  }
}

// The same from p as pairs of bf16 (Tp/2 pairs per row) and v as pack_v_bf16 leaves it.
template <int R, int V>
CTXEMB_BF16 inline void pv_tile_bf16(const Problem& P, const uint32_t* p, const uint32_t* vb, const float* inv,
                                     float* out) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < V; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t pairs = (P.T + 1) / 2, ldp = P.Tp / 2;
  for (int64_t t = 0; t < pairs; ++t) {
    __m512i w[V];
    for (int c = 0; c < V; ++c) w[c] = _mm512_loadu_si512(vb + t * P.D + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512i x = _mm512_set1_epi32(static_cast<int>(p[r * ldp + t]));
      for (int c = 0; c < V; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)x, (__m512bh)w[c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 scale = _mm512_set1_ps(inv[r]);
    for (int c = 0; c < V; ++c) _mm512_storeu_ps(out + r * P.H + 16 * c, _mm512_mul_ps(acc[r][c], scale));
  }
}

// ---- one task: every head for query rows [i0, i0 + rows) of sequence b, into out (rows x H, rows H apart) ---------
// A thread's working memory: the scores (then p), their running maxima (16 per row), 1 / sum per row; k transposed
// (float32), or k and v packed and the task's q (unless q/k/v are bfloat16, read in place) and p rows as pairs of
// bf16 (32-bit words).
struct Scratch {
  std::vector<float> scores, top, inv, k;
  std::vector<uint32_t> kb, vb, qb, pb;

  Scratch(const Problem& P, int64_t rows, bool bf16)
      : scores(rows * P.Tp), top(rows * 16), inv(rows), k(bf16 ? 0 : P.D * P.Tp), kb(bf16 ? P.D / 2 * P.Tp : 0),
        vb(bf16 ? P.Tp / 2 * P.D : 0), qb(bf16 && !P.qkv16 ? rows * P.D / 2 : 0), pb(bf16 ? rows * P.Tp / 2 : 0) {}
};

void attend_f32(const Problem& P, int64_t b, int64_t i0, int64_t rows, Scratch& w, float* out) {
  for (int64_t h = 0; h < P.N; ++h) {
    pack_k_f32(P, b, h, w.k.data());
    const float* q = P.row(b, i0) + h * P.D;
    tiles(rows, P.Tp / 16, [&](auto R, auto V, int64_t r0, int64_t v0) {
      qk_tile_f32<decltype(R)::value, decltype(V)::value>(P, b, h, i0 + r0, 16 * v0, q + r0 * 3 * P.H,
                                                            w.k.data() + 16 * v0,
                                                            w.scores.data() + r0 * P.Tp + 16 * v0,
                                                            w.top.data() + 16 * r0);
    });
    softmax_rows(P, rows, w.scores.data(), w.top.data(), w.inv.data());
    const float* v = P.row(b, 0) + 2 * P.H + h * P.D;
    tiles(rows, P.D / 16, [&](auto R, auto V, int64_t r0, int64_t v0) {
      pv_tile_f32<decltype(R)::value, decltype(V)::value>(P, w.scores.data() + r0 * P.Tp, v + 16 * v0,
                                                            w.inv.data() + r0, out + r0 * P.H + h * P.D + 16 * v0);
    });
  }
}

CTXEMB_BF16 void attend_bf16(const Problem& P, int64_t b, int64_t i0, int64_t rows, Scratch& w, float* out) {
  uint32_t *kb = w.kb.data(), *vb = w.vb.data(), *qb = w.qb.data(), *pb = w.pb.data();
  const int64_t half_d = P.D / 2, half_t = P.Tp / 2;
  for (int64_t h = 0; h < P.N; ++h) {
    pack_k_bf16(P, b, h, kb);
    pack_v_bf16(P, b, h, vb);
    // q's rows as pairs: in place from bfloat16 q/k/v, else rounded into qb
    const uint32_t* q = P.qkv16 ? reinterpret_cast<const uint32_t*>(P.row16(b, i0) + h * P.D) : qb;
    const int64_t ldq = P.qkv16 ? 3 * P.H / 2 : half_d;
    if (!P.qkv16)
      for (int64_t r = 0; r < rows; ++r) {
        const float* x = P.row(b, i0 + r) + h * P.D;
        for (int64_t d = 0; d < P.D; d += 16)
          store_bf16(reinterpret_cast<uint16_t*>(qb + r * half_d) + d, _mm512_loadu_ps(x + d));
      }
    tiles(rows, P.Tp / 16, [&](auto R, auto V, int64_t r0, int64_t v0) {
      qk_tile_bf16<decltype(R)::value, decltype(V)::value>(P, b, h, i0 + r0, 16 * v0, q + r0 * ldq, ldq,
                                                             kb + 16 * v0, w.scores.data() + r0 * P.Tp + 16 * v0,
                                                             w.top.data() + 16 * r0);
    });
    softmax_rows(P, rows, w.scores.data(), w.top.data(), w.inv.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < P.Tp; j += 16)
        store_bf16(reinterpret_cast<uint16_t*>(pb + r * half_t) + j, _mm512_loadu_ps(w.scores.data() + r * P.Tp + j));
    tiles(rows, P.D / 16, [&](auto R, auto V, int64_t r0, int64_t v0) {
      pv_tile_bf16<decltype(R)::value, decltype(V)::value>(P, pb + r0 * half_t, vb + 16 * v0, w.inv.data() + r0,
                                                             out + r0 * P.H + h * P.D + 16 * v0);
    });
  }
}

Problem problem(const at::Tensor& qkv, int64_t B, int64_t N, const c10::optional<at::Tensor>& mask, bool bf16,
                const c10::optional<at::Tensor>& offsets) {
  const bool half = qkv.scalar_type() == at::kBFloat16;
  TORCH_CHECK(qkv.dim() == 2 && (qkv.scalar_type() == at::kFloat || half) && qkv.is_contiguous(),
              "attention: qkv must be contiguous (B*T, 3H) float32 or bfloat16, got ", qkv.sizes(), " ",
              qkv.scalar_type());
  TORCH_CHECK(!half || bf16, "attention: bfloat16 q/k/v need the bf16 products (bf16=True)");
  TORCH_CHECK(B > 0 && N > 0 && (offsets.has_value() || qkv.size(0) % B == 0) && qkv.size(1) % (3 * N) == 0,
              "attention: qkv of shape ", qkv.sizes(), " does not split into ", B, " sequences and 3 x ", N, " heads");
  Problem P{};
  P.qkv = half ? nullptr : qkv.data_ptr<float>();
  P.qkv16 = half ? reinterpret_cast<const uint16_t*>(qkv.data_ptr<at::BFloat16>()) : nullptr;
  P.B = B;
  P.T = qkv.size(0) / B;
  if (offsets.has_value()) {
    TORCH_CHECK(offsets->dim() == 1 && offsets->numel() == B + 1 && offsets->scalar_type() == at::kLong &&
                offsets->is_contiguous(), "attention: offsets must be (", B + 1, ",) int64, got ", offsets->sizes());
    TORCH_CHECK(!mask.has_value(), "attention: packed sequences (offsets) take no mask");
    P.offsets = offsets->data_ptr<int64_t>();
    TORCH_CHECK(P.offsets[0] == 0 && P.offsets[B] == qkv.size(0), "attention: offsets must run from 0 to the ",
                qkv.size(0), " rows of qkv");
    P.T = 0;
    for (int64_t b = 0; b < B; ++b) {
      TORCH_CHECK(P.offsets[b + 1] > P.offsets[b], "attention: offsets must increase (sequence ", b, " is empty)");
      P.T = std::max(P.T, P.offsets[b + 1] - P.offsets[b]);
    }
  }
  P.N = N;
  P.H = qkv.size(1) / 3;
  P.D = P.H / N;
  TORCH_CHECK(P.D % 16 == 0, "attention: the head size must be a multiple of 16, got ", P.D);
  P.Tp = (P.T + 15) / 16 * 16;
  P.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(P.D)));
  if (mask.has_value()) {
    TORCH_CHECK(mask->scalar_type() == at::kFloat && mask->dim() == 4, "attention: mask must be 4-D float32");
    at::Tensor m = mask->expand({B, N, P.T, P.T});
    if (m.stride(3) != 1) m = P.mask_copy = m.contiguous();
    P.mask = m.data_ptr<float>();
    P.mb = m.stride(0);
    P.mn = m.stride(1);
    P.mi = m.stride(2);
  }
  return P;
}

// The attention of every (sequence, block of query rows) task, in parallel; each task's (rows, H) result goes to
// target(b, i0) (rows H apart), then finish(b, i0, rows, result).
template <typename Target, typename Finish>
void run_tasks(const Problem& P, bool bf16, Target target, Finish finish) {
  const int64_t blocks = (P.T + kQueryBlock - 1) / kQueryBlock;
  at::parallel_for(0, P.B * blocks, 1, [&](int64_t begin, int64_t end) {
    Scratch w(P, std::min(P.T, kQueryBlock), bf16);  // sized for the longest sequence
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / blocks, i0 = task % blocks * kQueryBlock;
      const int64_t rows = std::min(kQueryBlock, P.length(b) - i0);
      if (rows <= 0) continue;  // a packed sequence shorter than the longest
      float* out = target(b, i0);
      const Problem S = P.offsets ? P.sequence(b) : P;
      const int64_t sb = P.offsets ? 0 : b;
      if (bf16) attend_bf16(S, sb, i0, rows, w, out);
      else attend_f32(S, sb, i0, rows, w, out);
      finish(b, i0, rows, out);
    }
  });
}

}  // namespace

// softmax(q k^T / sqrt(D) + mask) v of every head, (B*T, 3H) -> (B*T, H) float32, tokens in qkv's order. With
// offsets (B + 1,), the rows are B packed sequences of their own lengths (no padding rows, no mask).
at::Tensor attention(const at::Tensor& qkv, int64_t batch, int64_t heads, const c10::optional<at::Tensor>& mask,
                     bool bf16, const c10::optional<at::Tensor>& offsets) {
  const Problem P = problem(qkv, batch, heads, mask, bf16, offsets);
  auto out = at::empty({qkv.size(0), P.H}, qkv.options().dtype(at::kFloat));
  float* op = out.data_ptr<float>();
  run_tasks(P, bf16, [&](int64_t b, int64_t i0) { return op + (P.first_row(b) + i0) * P.H; },
            [](int64_t, int64_t, int64_t, float*) {});
  return out;
}

// The same, quantized for the next Linear (its keep mask and outlier features) task by task from a per-thread
// scratch: (u, scale, zu, outliers) as quantize_rows would give for the float32 result.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_quantized(
    const at::Tensor& qkv, int64_t batch, int64_t heads, const c10::optional<at::Tensor>& mask, bool bf16,
    const c10::optional<at::Tensor>& next_keep, const c10::optional<at::Tensor>& next_outlier_index,
    const c10::optional<at::Tensor>& offsets) {
  const Problem P = problem(qkv, batch, heads, mask, bf16, offsets);
  const Quantizer q = quantizer(next_keep, next_outlier_index, P.H);
  auto result = empty_quantized(qkv.size(0), P.H, q.P, qkv.options());
  const QuantizedOutput out_q(result);
  const int64_t rows = std::min(P.T, kQueryBlock);
  auto scratch = at::empty({at::get_num_threads(), rows * P.H}, qkv.options().dtype(at::kFloat));
  float* scratch_base = scratch.data_ptr<float>();
  run_tasks(P, bf16, [&](int64_t, int64_t) { return scratch_base + at::get_thread_num() * rows * P.H; },
            [&](int64_t b, int64_t i0, int64_t n, float* out) {
              for (int64_t r = 0; r < n; ++r) {
                const int64_t t = P.first_row(b) + i0 + r;
                out_q.quantize(out + r * P.H, t, q);
              }
            });
  return result;
}

TORCH_LIBRARY_FRAGMENT(ctxemb_int8, m) {
  m.def("attention(Tensor qkv, int batch, int heads, Tensor? mask, bool bf16, Tensor? offsets=None) -> Tensor",
        &attention);
  m.def("attention_quantized(Tensor qkv, int batch, int heads, Tensor? mask, bool bf16, Tensor? next_keep, "
        "Tensor? next_outlier_index, Tensor? offsets=None) -> (Tensor, Tensor, Tensor, Tensor)", &attention_quantized);
}
