// make_args and set_grad_args (cuda_sdpa_args.cuh): SdpaParams and the gradient views into the
// kernels' argument block. Host code alone, in its own file so that the CPU emulator of the
// tensor-core kernels (tests/cuda_emulator) compiles it with them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_sdpa_args.cuh"

namespace tg::cuda {

namespace {
void strides4(const View& v, int64_t* out) {
  for (int d = 0; d < 4; ++d) out[d] = v.data ? v.strides[d] : 0;
}

}  // namespace

template <class T, class S>
Args<T, S> make_args(const SdpaParams& p) {
  Args<T, S> a{};
  a.q = static_cast<const S*>(p.q.data);
  a.k = static_cast<const S*>(p.k.data);
  a.v = static_cast<const S*>(p.v.data);
  strides4(p.q, a.qs);
  strides4(p.k, a.ks);
  strides4(p.v, a.vs);
  a.out = static_cast<S*>(p.out.data);
  a.o = a.out;
  strides4(p.out, a.outs);
  strides4(p.out, a.os);
  a.stats = static_cast<T*>(p.stats.data);
  strides4(p.stats, a.sts);
  a.mask = p.mask.data;
  a.mask_bool = p.mask.dtype == kBool;
  strides4(p.mask, a.ms);
  a.lens = p.lengths();
  a.kv_rows = static_cast<const int64_t*>(p.kv_rows.data);
  a.B = p.batch();
  a.Hq = p.heads_q();
  a.Hk = p.heads_kv();
  a.Sq = p.len_q();
  a.Skv = p.len_kv();
  a.Dqk = p.dim_qk();
  a.Dv = p.dim_v();
  a.scale = static_cast<T>(p.scale);
  a.softcap = static_cast<T>(p.softcap);
  a.keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout_p));
  a.causal = p.causal;
  a.alibi = p.alibi;
  a.window = p.window;
  a.dropout_p = static_cast<float>(p.dropout_p);
  a.seed = p.seed;
  a.offset = p.offset;
  return a;
}

template <class T, class S>
void set_grad_args(Args<T, S>& a, const View& dout, const SdpaGradViews& g) {
  a.dout = static_cast<const S*>(dout.data);
  strides4(dout, a.dos);
  a.dq = static_cast<S*>(g.dq.data);
  a.dk = static_cast<S*>(g.dk.data);
  a.dv = static_cast<S*>(g.dv.data);
  strides4(g.dq, a.dqs);
  strides4(g.dk, a.dks);
  strides4(g.dv, a.dvs);
  a.dscores = static_cast<T*>(g.dscores.data);
}

template Args<float> make_args<float>(const SdpaParams&);
template Args<double> make_args<double>(const SdpaParams&);
template Args<float, __nv_bfloat16> make_args<float, __nv_bfloat16>(const SdpaParams&);
template Args<float, __half> make_args<float, __half>(const SdpaParams&);
template void set_grad_args(Args<float>&, const View&, const SdpaGradViews&);
template void set_grad_args(Args<double>&, const View&, const SdpaGradViews&);
template void set_grad_args(Args<float, __nv_bfloat16>&, const View&, const SdpaGradViews&);
template void set_grad_args(Args<float, __half>&, const View&, const SdpaGradViews&);

}  // namespace tg::cuda
