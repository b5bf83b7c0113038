// SDPA on bfloat16/float16 through the float32 kernels: q, k, v, the mask and dout are read
// as float32 copies, and out, dq, dk, dv and the score gradient are accumulated in float32 and
// rounded once (the seeds' contract; the stats are float32 already). Both backends use it
// until they have kernels of their own for the 16-bit types.
#pragma once
#include "backends/half_as_float.h"
#include "backends/sdpa_params.h"

namespace tg {

inline bool sdpa_is_half(const SdpaParams& p) { return is_half(p.q.dtype); }

// q, k, v and the mask, read by both passes.
inline SdpaParams sdpa_inputs_as_float(HalfAsFloat& f, const SdpaParams& p) {
  SdpaParams w = p;
  w.q = f.in(p.q);
  w.k = f.in(p.k);
  w.v = f.in(p.v);
  w.mask = f.in(p.mask);
  return w;
}

// The forward writes out; the backward reads it (for rowsum(dout * out)) and writes the
// gradients.
inline SdpaParams sdpa_forward_as_float(HalfAsFloat& f, const SdpaParams& p) {
  SdpaParams w = sdpa_inputs_as_float(f, p);
  w.out = f.out(p.out);
  return w;
}
inline SdpaParams sdpa_backward_as_float(HalfAsFloat& f, const SdpaParams& p) {
  SdpaParams w = sdpa_inputs_as_float(f, p);
  w.out = f.in(p.out);
  return w;
}
// The score gradient is read too: the kernel leaves the tiles it skips as they were (zero).
inline SdpaGradViews sdpa_grads_as_float(HalfAsFloat& f, const SdpaGradViews& g) {
  return {f.out(g.dq), f.out(g.dk), f.out(g.dv), f.inout(g.dscores)};
}

}  // namespace tg
