#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/autograd.h"
#include "ops/ops.h"

namespace tg {

namespace {

// Element offsets (from raw_data) of t in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs(t.numel());
  Shape idx(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t o = 0;
    for (int64_t d = 0; d < t.dim(); ++d) o += idx[d] * t.strides()[d];
    offs[n] = o;
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  std::vector<Tensor> leaves;
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !in.requires_grad()) {
      leaves.push_back(in);
      continue;
    }
    TG_CHECK(in.dtype() == kFloat64, "gradcheck", "input ", i, " has dtype ", in.dtype(),
             ", expected float64");
    TG_CHECK(in.device().is_cpu(), "gradcheck", "input ", i, " is on ", in.device(),
             ", expected cpu");
    for (int64_t d = 0; d < in.dim(); ++d)
      TG_CHECK(in.strides()[d] != 0 || in.sizes()[d] <= 1, "gradcheck", "input ", i,
               " has overlapping memory (stride 0 in dim ", d, "); pass a contiguous copy");
    // A leaf that requires grad is used as it is, so that f may reach it through other
    // handles (a module's parameters); anything else becomes a leaf with the same strides.
    leaves.push_back(in.is_leaf() ? in : in.detach().requires_grad_(true));
    checked.push_back(i);
  }

  Tensor out = f(leaves);
  TG_CHECK(out.defined() && out.dtype() == kFloat64, "gradcheck", "f must return a float64 tensor");
  const int64_t n_out = out.numel();
  const bool full = n_out <= opts.max_jacobian_outputs;
  std::vector<Tensor> diff_leaves;
  diff_leaves.reserve(checked.size());
  for (size_t i : checked) diff_leaves.push_back(leaves[i]);

  // Cotangents: one-hot rows of the Jacobian, or one random projection.
  std::vector<Tensor> cotangents;
  if (full) {
    cotangents.reserve(n_out);
    for (int64_t k = 0; k < n_out; ++k) {
      std::vector<double> e(n_out, 0.0);
      e[k] = 1.0;
      cotangents.push_back(from_vector(e, out.sizes()));
    }
  } else {
    Generator gen{opts.seed, 0};
    cotangents.push_back(randn(out.sizes(), gen, kFloat64));
  }

  // analytic[c][j] = d<cotangent c, f> / d diff_leaves[j], row-major. An output that does not
  // require grad has zero analytic gradients (and fails if f really depends on the inputs).
  std::vector<std::vector<std::vector<double>>> analytic(cotangents.size());
  for (size_t c = 0; c < cotangents.size(); ++c) {
    for (size_t j = 0; j < diff_leaves.size(); ++j) {
      analytic[c].emplace_back(diff_leaves[j].numel(), 0.0);
    }
    if (!out.requires_grad()) continue;
    auto gs = grad({out}, diff_leaves, {cotangents[c]}, /*retain_graph=*/true);
    for (size_t j = 0; j < gs.size(); ++j) analytic[c][j] = gs[j].to_vector<double>();
  }

  GradcheckResult result;
  result.inputs.resize(inputs.size());
  std::ostringstream msg;
  NoGradGuard no_grad;
  auto eval = [&]() { return f(leaves).to_vector<double>(); };
  std::vector<std::vector<double>> cot_values;  // for the projected check
  if (!full)
    for (const Tensor& c : cotangents) cot_values.push_back(c.to_vector<double>());
  for (size_t j = 0; j < checked.size(); ++j) {
    const size_t i = checked[j];
    Tensor leaf = leaves[i];
    double* base = static_cast<double*>(leaf.raw_data());
    auto offs = element_offsets(leaf);
    GradcheckInputReport rep;
    rep.checked = true;
    double worst_ratio = -1;
    for (int64_t e = 0; e < leaf.numel(); ++e) {
      double orig = base[offs[e]];
      base[offs[e]] = orig + opts.eps;
      auto fp = eval();
      base[offs[e]] = orig - opts.eps;
      auto fm = eval();
      base[offs[e]] = orig;
      for (size_t c = 0; c < cotangents.size(); ++c) {
        double num;
        if (full) {
          num = (fp[c] - fm[c]) / (2 * opts.eps);
        } else {
          const std::vector<double>& r = cot_values[c];
          double s = 0;
          for (int64_t k = 0; k < n_out; ++k) s += r[k] * (fp[k] - fm[k]);
          num = s / (2 * opts.eps);
        }
        double ana = analytic[c][j][e];
        double err = std::abs(ana - num);
        double tol = opts.atol + opts.rtol * std::abs(num);
        double ratio = std::isfinite(err) ? err / tol : INFINITY;
        if (ratio > worst_ratio) {
          worst_ratio = ratio;
          rep.worst_index = e;
          rep.worst_output = full ? static_cast<int64_t>(c) : -1;
          rep.analytic = ana;
          rep.numeric = num;
          rep.error = err;
        }
      }
    }
    rep.ok = worst_ratio <= 1.0;
    result.ok = result.ok && rep.ok;
    msg << "input " << i << (rep.ok ? " ok" : " MISMATCH") << ": worst element " << rep.worst_index
        << " (output " << rep.worst_output << "): analytic " << rep.analytic << ", numeric "
        << rep.numeric << ", |diff| " << rep.error << "\n";
    result.inputs[i] = rep;
  }
  result.message = msg.str();
  return result;
}

GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  const Tensor out = f(inputs);
  TG_CHECK(out.defined() && out.dtype() == kFloat64, "gradgradcheck",
           "f must return a float64 tensor");
  const Shape& out_shape = out.sizes();
  Generator gen{opts.seed ^ 0x9e3779b97f4a7c15ULL, 0};
  std::vector<Tensor> all = inputs;
  all.push_back(randn(out_shape, gen, kFloat64).requires_grad_(true));
  const size_t n = inputs.size();
  // The first-order gradient, flattened into one vector: what gradcheck differentiates.
  auto first_order = [&f, n](const std::vector<Tensor>& xs) {
    EnableGradGuard grad_on;  // gradcheck evaluates under NoGradGuard
    std::vector<Tensor> diff;
    for (size_t i = 0; i < n; ++i)
      if (xs[i].defined() && xs[i].requires_grad()) diff.push_back(xs[i]);
    Tensor out = f(std::vector<Tensor>(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n)));
    std::vector<Tensor> flat;
    if (out.requires_grad()) {
      for (const Tensor& g : grad({out}, diff, {xs[n]}, true, true, /*create_graph=*/true))
        flat.push_back(g.reshape({-1}));
    } else {
      for (const Tensor& d : diff) flat.push_back(zeros({d.numel()}, kFloat64));
    }
    return flat.empty() ? zeros({0}, kFloat64) : cat(flat, 0);
  };
  return gradcheck(first_order, all, opts);
}

}  // namespace tg
