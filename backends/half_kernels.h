// The 16-bit entries of the kernels that compute in float32 or float64 only (softmax, the
// embedding gradient, RMSNorm and AdamW on both backends; SDPA, RoPE and SwiGLU on CUDA, whose
// CPU kernels read 16-bit views in place; the CPU's batched GEMM), written once:
// each says which views its kernel reads and writes, runs the backend's own kernel on float32
// stand-ins of them (half_as_float.h) and rounds the outputs once. Each returns false, doing
// nothing, when none of its views is 16-bit; a backend's kernel starts with
//   if (half_kernels::softmax(*this, device, x, out, log)) return;
// and the call it makes back into that kernel, on float32 views, runs the float32 code.
// SDPA keeps the seeds' contract this way: q, k, v, the mask and dout read as float32, out,
// dq, dk, dv and the score gradient accumulated in float32 and rounded once; the stats are
// float32 already.
#pragma once
#include "backends/half_as_float.h"
#include "backends/sdpa_params.h"

namespace tg::half_kernels {

inline bool matmul(Backend& be, Device d, const View& a, const View& b, const View& c) {
  if (!any_half({&a, &b, &c})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) { be.matmul(f.in(a), f.in(b), f.out(c)); });
  return true;
}

inline bool softmax(Backend& be, Device d, const View& x, const View& out, bool log) {
  if (!any_half({&x})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) { be.softmax(f.in(x), f.out(out), log); });
  return true;
}

inline bool scatter_add_rows(Backend& be, Device d, const View& grad, const View& ids,
                             const View& grad_weight) {
  if (!any_half({&grad})) return false;
  with_float32(be, d,
               [&](HalfAsFloat& f) { be.scatter_add_rows(f.in(grad), ids, f.inout(grad_weight)); });
  return true;
}

// --- SDPA

// The stand-in of one SDPA row view through `convert` (f.in, f.out or f.inout). A ragged row
// view (batch stride 0, its sequences' rows found through the offsets) is converted as the
// `packed` rows of the tensor behind it, then seen as a row view again.
template <class Convert>
View sdpa_rows(const SdpaParams& p, const View& v, int64_t packed, Convert&& convert) {
  if (!p.ragged() || !v.data) return convert(v);
  View whole = v;
  whole.sizes[0] = 1;
  whole.sizes[2] = packed;
  View r = convert(whole);
  r.sizes = v.sizes;
  r.strides[0] = 0;
  return r;
}

inline SdpaParams sdpa_inputs(HalfAsFloat& f, const SdpaParams& p) {
  const auto in = [&f](const View& v) { return f.in(v); };
  SdpaParams w = p;
  w.q = sdpa_rows(p, p.q, p.packed_q, in);
  w.k = sdpa_rows(p, p.k, p.packed_kv, in);
  w.v = sdpa_rows(p, p.v, p.packed_kv, in);
  w.mask = f.in(p.mask);  // (B, Hq, Sq, Skv) in either layout
  return w;
}

inline bool sdpa_forward(Backend& be, Device d, const SdpaParams& p) {
  if (!is_half(p.q.dtype)) return false;
  with_float32(be, d, [&](HalfAsFloat& f) {
    SdpaParams w = sdpa_inputs(f, p);
    w.out = sdpa_rows(p, p.out, p.packed_q, [&f](const View& v) { return f.out(v); });
    be.sdpa_forward(w);
  });
  return true;
}

// out is read (rowsum(dout * out)); the score gradient too: the kernel leaves the tiles it
// skips as they were (zero).
inline bool sdpa_backward(Backend& be, Device d, const SdpaParams& p, const View& dout,
                          const SdpaGradViews& g) {
  if (!is_half(p.q.dtype)) return false;
  with_float32(be, d, [&](HalfAsFloat& f) {
    const auto in = [&f](const View& v) { return f.in(v); };
    const auto out = [&f](const View& v) { return f.out(v); };
    SdpaParams w = sdpa_inputs(f, p);
    w.out = sdpa_rows(p, p.out, p.packed_q, in);
    be.sdpa_backward(w, sdpa_rows(p, dout, p.packed_q, in),
                     {sdpa_rows(p, g.dq, p.packed_q, out), sdpa_rows(p, g.dk, p.packed_kv, out),
                      sdpa_rows(p, g.dv, p.packed_kv, out), f.inout(g.dscores)});
  });
  return true;
}

// --- the fused kernels (only a backend that has one calls its 16-bit entry)

inline bool rms_norm_forward(Backend& be, Device d, const View& x, const View& w, double eps,
                             const View& y, const View& rstd) {
  if (!any_half({&x, &w})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) {
    be.rms_norm_forward(f.in(x), f.in(w), eps, f.out(y), f.out(rstd));
  });
  return true;
}

inline bool rms_norm_backward(Backend& be, Device d, const View& dy, const View& x, const View& w,
                              const View& rstd, const View& dx, const View& dw) {
  if (!any_half({&x, &w})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) {
    be.rms_norm_backward(f.in(dy), f.in(x), f.in(w), f.in(rstd), f.out(dx), f.out(dw));
  });
  return true;
}

inline bool rope(Backend& be, Device d, const View& x, const View& cos, const View& sin,
                 int64_t seq_dim, const View& out) {
  if (!any_half({&x, &cos})) return false;
  with_float32(
      be, d, [&](HalfAsFloat& f) { be.rope(f.in(x), f.in(cos), f.in(sin), seq_dim, f.out(out)); });
  return true;
}

inline bool swiglu_forward(Backend& be, Device d, const View& x, const View& out) {
  if (!any_half({&x})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) { be.swiglu_forward(f.in(x), f.out(out)); });
  return true;
}

inline bool swiglu_backward(Backend& be, Device d, const View& dout, const View& x,
                            const View& dx) {
  if (!any_half({&x})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) { be.swiglu_backward(f.in(dout), f.in(x), f.out(dx)); });
  return true;
}

inline bool adamw_step(Backend& be, Device d, const View& p, const View& g, const View& m,
                       const View& v, const AdamWStep& s) {
  if (!any_half({&p, &g, &m, &v})) return false;
  with_float32(be, d, [&](HalfAsFloat& f) {
    be.adamw_step(f.inout(p), f.in(g), f.inout(m), f.inout(v), s);
  });
  return true;
}

}  // namespace tg::half_kernels
