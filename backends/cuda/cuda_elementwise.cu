// Copy, fill, arange, unary, binary and where on strided CUDA views. The math is the CPU's:
// the ops' functors of backends/scalar_ops.h, generated from elementwise_ops.def.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/dispatch.h"
#include "backends/scalar_ops.h"

namespace tg::cuda {
namespace {

// One thread per output element (grid-stride); each operand at its own strided offset.
template <class To, class Ti, class F>
__global__ void map1_kernel(Offsets<2> o, To* out, const Ti* x, F f, int64_t n) {
  TG_GRID_STRIDE(i, n) {
    int64_t off[2];
    o.at(i, off);
    out[off[0]] = f(x[off[1]]);
  }
}

template <class To, class Ti, class F>
__global__ void map2_kernel(Offsets<3> o, To* out, const Ti* a, const Ti* b, F f, int64_t n) {
  TG_GRID_STRIDE(i, n) {
    int64_t off[3];
    o.at(i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

template <class T>
__global__ void where_kernel(Offsets<4> o, T* out, const bool* c, const T* a, const T* b,
                             int64_t n) {
  TG_GRID_STRIDE(i, n) {
    int64_t off[4];
    o.at(i, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <class T>
__global__ void fill_kernel(Offsets<1> o, T* out, T value, int64_t n) {
  TG_GRID_STRIDE(i, n) {
    int64_t off[1];
    o.at(i, off);
    out[off[0]] = value;
  }
}

template <class T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  TG_GRID_STRIDE(i, n) { out[i] = static_cast<T>(start + static_cast<double>(i) * step); }
}

template <class To, class Ti>
struct Cast {
  __device__ To operator()(Ti v) const { return static_cast<To>(v); }
};
// An op of elementwise_ops.def with its parameter bound: x -> fn(x, p), in compute_t<T>.
template <class Fn, class T>
struct BoundUnary {
  Fn fn;
  compute_t<T> p;
  __device__ auto operator()(T x) const { return scalar::apply_unary(fn, x, p); }
};
template <class Fn, class T>
struct StoredBinary {
  Fn fn;
  __device__ auto operator()(T a, T b) const { return scalar::apply_binary(fn, a, b); }
};

template <class To, class Ti, class F>
void map1(cudaStream_t s, const View& x, const View& out, F f) {
  const int64_t n = out.numel();
  if (!n) return;
  Offsets<2> o = make_offsets<2>(out.sizes, {&out.strides, &x.strides});
  map1_kernel<<<grid_for(n), kThreads, 0, s>>>(o, static_cast<To*>(out.data),
                                               static_cast<const Ti*>(x.data), f, n);
  check_launch("elementwise kernel");
}

template <class To, class Ti, class F>
void map2(cudaStream_t s, const View& a, const View& b, const View& out, F f) {
  const int64_t n = out.numel();
  if (!n) return;
  Offsets<3> o = make_offsets<3>(out.sizes, {&out.strides, &a.strides, &b.strides});
  map2_kernel<<<grid_for(n), kThreads, 0, s>>>(o, static_cast<To*>(out.data),
                                               static_cast<const Ti*>(a.data),
                                               static_cast<const Ti*>(b.data), f, n);
  check_launch("binary kernel");
}

}  // namespace

void CudaBackend::copy(const View& src, const View& dst) {
  cudaStream_t s = enter(device);
  dispatch(dst.dtype, [&](auto to) {
    using To = decltype(to);
    dispatch(src.dtype, [&](auto ti) {
      using Ti = decltype(ti);
      map1<To, Ti>(s, src, dst, Cast<To, Ti>{});
    });
  });
}

void CudaBackend::fill(const View& dst, double value) {
  cudaStream_t s = enter(device);
  const int64_t n = dst.numel();
  if (!n) return;
  Offsets<1> o = make_offsets<1>(dst.sizes, {&dst.strides});
  dispatch(dst.dtype, [&](auto t) {
    using T = decltype(t);
    fill_kernel<<<grid_for(n), kThreads, 0, s>>>(o, static_cast<T*>(dst.data),
                                                 static_cast<T>(value), n);
  });
  check_launch("fill kernel");
}

void CudaBackend::arange(const View& dst, double start, double step) {
  cudaStream_t s = enter(device);
  const int64_t n = dst.numel();
  if (!n) return;
  dispatch(dst.dtype, [&](auto t) {
    using T = decltype(t);
    arange_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(dst.data), start, step, n);
  });
  check_launch("arange kernel");
}

// One kernel per op of elementwise_ops.def and input dtype of its domain (scalar::visit_typed).
void CudaBackend::unary(UnaryOp op, const View& x, const View& out, double param) {
  cudaStream_t s = enter(device);
  scalar::visit_typed(op, x.dtype, "unary", [&](auto fn, auto t) {
    using T = decltype(t);
    map1<scalar::stored_t<decltype(fn), T>, T>(
        s, x, out, BoundUnary<decltype(fn), T>{fn, static_cast<compute_t<T>>(param)});
  });
}

void CudaBackend::binary(BinaryOp op, const View& a, const View& b, const View& out) {
  cudaStream_t s = enter(device);
  scalar::visit_typed(op, a.dtype, "binary", [&](auto fn, auto t) {
    using T = decltype(t);
    map2<scalar::stored_t<decltype(fn), T>, T>(s, a, b, out, StoredBinary<decltype(fn), T>{fn});
  });
}

void CudaBackend::where(const View& cond, const View& a, const View& b, const View& out) {
  cudaStream_t s = enter(device);
  const int64_t n = out.numel();
  if (!n) return;
  Offsets<4> o = make_offsets<4>(out.sizes, {&out.strides, &cond.strides, &a.strides, &b.strides});
  dispatch(out.dtype, [&](auto t) {
    using T = decltype(t);
    where_kernel<<<grid_for(n), kThreads, 0, s>>>(
        o, static_cast<T*>(out.data), static_cast<const bool*>(cond.data),
        static_cast<const T*>(a.data), static_cast<const T*>(b.data), n);
  });
  check_launch("where kernel");
}

}  // namespace tg::cuda
