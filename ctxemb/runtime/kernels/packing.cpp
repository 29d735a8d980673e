// The int8 path's unpadded batches (ctxemb.runtime.int8.packed_hidden_states): the kept layers' states of the packed
// real tokens, n tensors of (M, H), written into the padded batch's (B*T, n, H) result in one pass over the rows,
// where stacking them and then scattering the stack read and wrote every state twice. Compiled into
// ctxemb.runtime.kernels' library with int8_vnni.cpp.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

// out[rows[m], j] = layers[j][m] for every packed row m and kept layer j; every other row of out zero.
at::Tensor unpack_rows(at::TensorList layers, const at::Tensor& rows, int64_t padded_rows) {
  TORCH_CHECK(!layers.empty(), "unpack_rows: no layers given");
  TORCH_CHECK(rows.dim() == 1 && rows.scalar_type() == at::kLong && rows.is_contiguous(),
              "unpack_rows: rows must be a contiguous (M,) int64 tensor");
  const int64_t M = rows.size(0), H = layers[0].size(-1), n = static_cast<int64_t>(layers.size());
  std::vector<const float*> src;
  for (const at::Tensor& x : layers) {
    TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous() && x.numel() == M * H,
                "unpack_rows: every layer must be a contiguous float32 tensor of ", M, " x ", H, " values, got ",
                x.sizes(), " ", x.scalar_type());
    src.push_back(x.data_ptr<float>());
  }
  const int64_t* rp = rows.data_ptr<int64_t>();
  for (int64_t m = 0; m < M; ++m)
    TORCH_CHECK(rp[m] >= 0 && rp[m] < padded_rows && (m == 0 || rp[m] > rp[m - 1]),
                "unpack_rows: rows must increase within [0, ", padded_rows, "), got ", rp[m], " at ", m);
  auto out = at::empty({padded_rows, n, H}, layers[0].options());
  float* op = out.data_ptr<float>();
  const int64_t row_bytes = n * H * static_cast<int64_t>(sizeof(float));
  at::parallel_for(0, padded_rows, 64, [&](int64_t begin, int64_t end) {
    // the packed rows that land in [begin, end): rows is increasing
    int64_t m = std::lower_bound(rp, rp + M, begin) - rp;
    for (int64_t r = begin; r < end; ++r) {
      float* dst = op + r * n * H;
      if (m < M && rp[m] == r) {
        for (int64_t j = 0; j < n; ++j) std::memcpy(dst + j * H, src[j] + m * H, H * sizeof(float));
        ++m;
      } else {
        std::memset(dst, 0, row_bytes);
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ctxemb_int8, m) {
  m.def("unpack_rows(Tensor[] layers, Tensor rows, int padded_rows) -> Tensor", &unpack_rows);
}
