// Sum / max / min over any set of dims. A group of G threads (1, 32 or 256) reduces one
// output (or one chunk of it, for a few very long reductions): each thread walks its share of
// the reduced elements in order, then the group combines in a fixed tree, and chunks are
// combined in order. No atomics, so results are bitwise the same on every run.
#include <algorithm>
#include <limits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "backends/reduce_dims.h"

namespace tg::cuda {
namespace {

template <class Acc>
struct Partial {
  Acc v;
  int64_t idx;  // row-major index within the reduced dims (Max/Min)
  bool nan;
};

// The better of two partials for Max/Min: NaN first, then the extremum, then the lower index
// (so the first extremum wins, as on the CPU).
template <class Acc>
__device__ Partial<Acc> pick(Partial<Acc> a, Partial<Acc> b, bool is_max) {
  if (a.nan != b.nan) return a.nan ? a : b;
  if (!a.nan && a.v != b.v) return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  return a.idx <= b.idx ? a : b;
}

// Group g reduces output g / chunks over the reduced indices of chunk g % chunks. With one
// chunk it writes the output; with several it writes its partial for finish_kernel.
template <class T, class Acc, int G>
__global__ void reduce_kernel(Offsets<2> kept, Offsets<1> red, const T* x, T* out, int64_t* arg,
                              Partial<Acc>* partial, int64_t chunks, int64_t chunk_len,
                              int64_t n_out, int64_t n_red, ReduceOp op) {
  constexpr int kGroups = kThreads / G;
  __shared__ Acc s_v[kThreads];
  __shared__ int64_t s_i[kThreads];
  __shared__ bool s_nan[kThreads];
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const bool is_sum = op == ReduceOp::Sum, is_max = op == ReduceOp::Max;
  const int64_t n_groups = n_out * chunks;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kGroups; base < n_groups;
       base += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t g = base + group, o = g / chunks;
    const int64_t r0 = (g % chunks) * chunk_len;
    const int64_t r1 = r0 + chunk_len < n_red ? r0 + chunk_len : n_red;
    Partial<Acc> p{is_sum ? Acc(0)
                          : (is_max ? -std::numeric_limits<Acc>::infinity()
                                    : std::numeric_limits<Acc>::infinity()),
                   0, false};
    int64_t ko[2] = {0, 0};
    if (g < n_groups) {
      kept.at(o, ko);
      for (int64_t r = r0 + lane; r < r1; r += G) {
        int64_t ro[1];
        red.at(r, ro);
        const Acc v = static_cast<Acc>(x[ko[0] + ro[0]]);
        if (is_sum) {
          p.v += v;
        } else {
          p = pick(p, Partial<Acc>{v, r, v != v}, is_max);
        }
      }
    }
    if (G > 1) {
      s_v[threadIdx.x] = p.v;
      s_i[threadIdx.x] = p.idx;
      s_nan[threadIdx.x] = p.nan;
      __syncthreads();
      for (int width = G / 2; width > 0; width /= 2) {
        if (lane < width) {
          const int other = threadIdx.x + width;
          if (is_sum) {
            s_v[threadIdx.x] += s_v[other];
          } else {
            Partial<Acc> q =
                pick(Partial<Acc>{s_v[threadIdx.x], s_i[threadIdx.x], s_nan[threadIdx.x]},
                     Partial<Acc>{s_v[other], s_i[other], s_nan[other]}, is_max);
            s_v[threadIdx.x] = q.v;
            s_i[threadIdx.x] = q.idx;
            s_nan[threadIdx.x] = q.nan;
          }
        }
        __syncthreads();
      }
      p = Partial<Acc>{s_v[threadIdx.x], s_i[threadIdx.x], s_nan[threadIdx.x]};
      __syncthreads();
    }
    if (lane == 0 && g < n_groups) {
      if (chunks > 1) {
        partial[g] = p;
      } else {
        out[ko[1]] = static_cast<T>(p.v);
        if (arg) arg[ko[1]] = p.idx;
      }
    }
  }
}

// Combines each output's chunk partials in chunk order.
template <class T, class Acc>
__global__ void finish_kernel(Offsets<2> kept, const Partial<Acc>* partial, int64_t chunks, T* out,
                              int64_t* arg, int64_t n_out, ReduceOp op) {
  TG_GRID_STRIDE(o, n_out) {
    Partial<Acc> p = partial[o * chunks];
    for (int64_t c = 1; c < chunks; ++c) {
      const Partial<Acc>& q = partial[o * chunks + c];
      if (op == ReduceOp::Sum) {
        p.v += q.v;
      } else {
        p = pick(p, q, op == ReduceOp::Max);
      }
    }
    int64_t ko[2];
    kept.at(o, ko);
    out[ko[1]] = static_cast<T>(p.v);
    if (arg) arg[ko[1]] = p.idx;
  }
}

template <class T, class Acc>
void reduce_typed(int device, cudaStream_t s, ReduceOp op, const View& x, const View& out,
                  const View& arg) {
  const ReduceDims rd = split_reduce_dims(x, out);
  const Shape &kept_sizes = rd.kept_sizes, &kept_xst = rd.kept_xst, &kept_ost = rd.kept_ost;
  const int64_t n_out = numel_of(kept_sizes), n_red = numel_of(rd.red_sizes);
  if (n_out == 0) return;
  Offsets<2> kept = make_offsets<2>(kept_sizes, {&kept_xst, &kept_ost});
  Offsets<1> red = make_offsets<1>(rd.red_sizes, {&rd.red_st});
  // One thread per output when the outputs are many and adjacent in x (coalesced loads) or the
  // reductions short; a block per output for a few long reductions; a warp otherwise.
  const bool adjacent_outputs = !kept_xst.empty() && kept_xst.back() == 1;
  const T* xp = static_cast<const T*>(x.data);
  T* op_ = static_cast<T*>(out.data);
  int64_t* ap = static_cast<int64_t*>(arg.data);
  if (n_red <= 16 || (adjacent_outputs && n_out >= 2048)) {
    reduce_kernel<T, Acc, 1><<<grid_for(n_out), kThreads, 0, s>>>(kept, red, xp, op_, ap, nullptr,
                                                                  1, n_red, n_out, n_red, op);
  } else if (n_out < 64 && n_red >= 32768) {
    // Few long reductions: split each into chunks of 8192 (at most 128) reduced by a block
    // each, then add the chunks in order: deterministic, and the whole GPU at work.
    const int64_t chunks = std::min<int64_t>(128, (n_red + 8191) / 8192);
    const int64_t chunk_len = (n_red + chunks - 1) / chunks;
    Scratch partial(n_out * chunks * sizeof(Partial<Acc>), device);
    reduce_kernel<T, Acc, kThreads><<<grid_for(n_out * chunks * kThreads), kThreads, 0, s>>>(
        kept, red, xp, op_, ap, partial.as<Partial<Acc>>(), chunks, chunk_len, n_out, n_red, op);
    check_launch("reduce kernel");
    finish_kernel<T, Acc><<<grid_for(n_out), kThreads, 0, s>>>(kept, partial.as<Partial<Acc>>(),
                                                               chunks, op_, ap, n_out, op);
  } else {
    reduce_kernel<T, Acc, 32><<<grid_for(n_out * 32), kThreads, 0, s>>>(
        kept, red, xp, op_, ap, nullptr, 1, n_red, n_out, n_red, op);
  }
  check_launch("reduce kernel");
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const View& x, const View& out, const View& arg) {
  cudaStream_t s = enter(device);
  dispatch(x.dtype, [&](auto t) {
    using T = decltype(t);
    reduce_typed<T, reduce_acc_t<T>>(device, s, op, x, out, arg);
  });
}

}  // namespace tg::cuda
