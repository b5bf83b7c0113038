// tg::Tensor: a cheap shared handle to (storage, sizes, strides, offset, dtype) plus the
// autograd fields. Views share storage. Ops that members forward to live in ops/.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tg {

struct Node;       // autograd/node.h
struct GradHooks;  // autograd/hooks.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t offset = 0;
  DType dtype = kFloat32;
  // Autograd: a leaf has requires_grad and no grad_fn; a result of a recorded op has a
  // grad_fn (the Node that produced it, owned here) and its output slot.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
  int output_nr = 0;
  std::shared_ptr<GradHooks> grad_hooks;  // a leaf's post-accumulate-grad hooks; null: none
};

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}    // NOLINT: implicit so zeros({2}, kFloat64) reads well
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  TensorOptions dtype(DType t) const {
    auto o = *this;
    o.dtype_ = t;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A fresh, uninitialized, contiguous tensor; its size errors carry `op` (the factory called).
  static Tensor empty_like_shape(const Shape& sizes, DType dtype, Device device,
                                 const char* op = "empty");

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // --- metadata (each an "[name] ... undefined" error on an undefined tensor, never a null
  // dereference: a default-constructed Tensor, or the grad() of a tensor that received none)
  const Shape& sizes() const { return checked("sizes").sizes; }
  const Shape& shape() const { return checked("shape").sizes; }
  const Shape& strides() const { return checked("strides").strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return checked("offset").offset; }
  int64_t dim() const { return static_cast<int64_t>(checked("dim").sizes.size()); }
  int64_t numel() const { return numel_of(checked("numel").sizes); }
  DType dtype() const { return checked("dtype").dtype; }
  Device device() const { return checked("device").storage->device(); }
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  bool is_contiguous() const;
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // Pointer to the first element (storage + offset); device memory for CUDA tensors.
  void* raw_data() const;
  template <class T>
  T* data_ptr() const {
    checked("data_ptr");
    TG_CHECK(dtype() == dtype_of<T>::value, "data_ptr", "tensor has dtype ", dtype(),
             ", requested ", dtype_of<T>::value);
    return static_cast<T*>(raw_data());
  }

  // --- autograd (autograd/)
  bool requires_grad() const { return checked("requires_grad").requires_grad; }
  Tensor& requires_grad_(bool r = true);
  Tensor grad() const;
  // Makes g this tensor's .grad() (as assigning torch's .grad): same shape, dtype and device;
  // an undefined g clears it.
  void set_grad(const Tensor& g) const;
  void zero_grad() const;
  Tensor detach() const;
  bool is_leaf() const { return checked("is_leaf").grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return checked("grad_fn").grad_fn; }
  // See tg::backward (autograd/autograd.h) for retain_graph and create_graph.
  void backward(const Tensor& grad_output = Tensor(),
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false) const;

  // --- views, sharing storage (ops/views.cpp)
  Tensor view(const Shape& sizes) const;     // contiguous-compatible only; -1 infers a size
  Tensor reshape(const Shape& sizes) const;  // a view when possible, else a copy
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& sizes) const;  // -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten() const;
  // A view that only adds or drops size-1 dims (squeeze/unsqueeze), whatever the strides.
  Tensor reshape_view_of_dims(const Shape& sizes) const;
  Tensor contiguous() const;  // the one strided copy (a no-op when already contiguous)
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // --- in place, for optimizers and initialisation (ops/inplace.cpp)
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& copy_(const Tensor& src);
  // self.select(dim, index[i]) = source.select(dim, i) for each i (PyTorch's index_copy_):
  // index 1-D int64 of distinct entries in [0, size(dim)); source self's shape with
  // index.numel() along dim, self's dtype and device. One kernel when self is contiguous and
  // dim is 0 (a paged cache's new rows), else a copy per index.
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source);
  Tensor& zero_();
  Tensor& fill_(double value);

  // --- read back (copies to a contiguous CPU buffer of T)
  template <class T>
  std::vector<T> to_vector() const;
  template <class T>
  T item() const;

 private:
  TensorImpl& checked(const char* op) const {
    if (!impl_) [[unlikely]]
      undefined(op);
    return *impl_;
  }
  [[noreturn]] static void undefined(const char* op);

  std::shared_ptr<TensorImpl> impl_;
};

namespace detail {
// A CPU, contiguous tensor of `dtype` holding this tensor's values.
Tensor readable(const Tensor& t, DType dtype);
}  // namespace detail

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detail::readable(*this, dtype_of<T>::value);
  const T* p = static_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}

template <class T>
T Tensor::item() const {
  checked("item");
  TG_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape ",
           shape_str(sizes()));
  return to_vector<T>()[0];
}

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Threads used by CPU kernels (OpenMP and Eigen). Also read from OMP_NUM_THREADS.
void set_num_threads(int n);
int get_num_threads();

}  // namespace tg
