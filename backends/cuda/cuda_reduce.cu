// Sum / max / min over any set of dims. A group of G threads (1, 32 or 256) reduces one
// output: each thread walks its share of the reduced elements in order, then the group
// combines in a fixed tree. No atomics, so results are bitwise the same on every run.
#include <limits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"

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

template <class T, class Acc, int G>
__global__ void reduce_kernel(Offsets<2> kept, Offsets<1> red, const T* x, T* out, int64_t* arg,
                              int64_t n_out, int64_t n_red, ReduceOp op) {
  constexpr int kGroups = kThreads / G;
  __shared__ Acc s_v[kThreads];
  __shared__ int64_t s_i[kThreads];
  __shared__ bool s_nan[kThreads];
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const bool is_sum = op == ReduceOp::Sum, is_max = op == ReduceOp::Max;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kGroups; base < n_out;
       base += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t o = base + group;
    Partial<Acc> p{is_sum ? Acc(0)
                          : (is_max ? -std::numeric_limits<Acc>::infinity()
                                    : std::numeric_limits<Acc>::infinity()),
                   0, false};
    int64_t ko[2] = {0, 0};
    if (o < n_out) {
      kept.at(o, ko);
      for (int64_t r = lane; r < n_red; r += G) {
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
            Partial<Acc> q = pick(Partial<Acc>{s_v[threadIdx.x], s_i[threadIdx.x], s_nan[threadIdx.x]},
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
    if (lane == 0 && o < n_out) {
      out[ko[1]] = static_cast<T>(p.v);
      if (arg) arg[ko[1]] = p.idx;
    }
  }
}

template <class T, class Acc>
void reduce_typed(cudaStream_t s, ReduceOp op, const View& x, const View& out, const View& arg) {
  const size_t nd = x.sizes.size();
  Shape kept_sizes, kept_xst, kept_ost, red_sizes, red_st;
  for (size_t d = 0; d < nd; ++d) {
    if (out.sizes[d] == 1 && x.sizes[d] != 1) {
      red_sizes.push_back(x.sizes[d]);
      red_st.push_back(x.strides[d]);
    } else {
      kept_sizes.push_back(x.sizes[d]);
      kept_xst.push_back(x.strides[d]);
      kept_ost.push_back(out.strides[d]);
    }
  }
  const int64_t n_out = numel_of(kept_sizes), n_red = numel_of(red_sizes);
  if (n_out == 0) return;
  Offsets<2> kept = make_offsets<2>(kept_sizes, {&kept_xst, &kept_ost});
  Offsets<1> red = make_offsets<1>(red_sizes, {&red_st});
  // One thread per output when the outputs are many and adjacent in x (coalesced loads) or the
  // reductions short; a block per output for a few long reductions; a warp otherwise.
  const bool adjacent_outputs = !kept_xst.empty() && kept_xst.back() == 1;
  const T* xp = static_cast<const T*>(x.data);
  T* op_ = static_cast<T*>(out.data);
  int64_t* ap = static_cast<int64_t*>(arg.data);
  if (n_red <= 16 || (adjacent_outputs && n_out >= 2048)) {
    reduce_kernel<T, Acc, 1><<<grid_for(n_out), kThreads, 0, s>>>(kept, red, xp, op_, ap, n_out,
                                                                   n_red, op);
  } else if (n_out < 64 && n_red >= 8192) {
    reduce_kernel<T, Acc, kThreads>
        <<<grid_for(n_out * kThreads), kThreads, 0, s>>>(kept, red, xp, op_, ap, n_out, n_red, op);
  } else {
    reduce_kernel<T, Acc, 32>
        <<<grid_for(n_out * 32), kThreads, 0, s>>>(kept, red, xp, op_, ap, n_out, n_red, op);
  }
  check_launch("reduce kernel");
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const View& x, const View& out, const View& arg) {
  cudaStream_t s = enter(device);
  switch (x.dtype) {
    case DType::Float32:
      reduce_typed<float, float>(s, op, x, out, arg);
      break;
    case DType::Float64:
      reduce_typed<double, double>(s, op, x, out, arg);
      break;
    case DType::Int64:
      reduce_typed<int64_t, double>(s, op, x, out, arg);
      break;
    case DType::Bool:
      reduce_typed<bool, double>(s, op, x, out, arg);
      break;
  }
}

}  // namespace tg::cuda
