// One direction of the packed GRU / LSTM recurrences of trainables/_packed_rnn.py, with
// the per-step loop in C++: per step one matrix product (ATen's, as the Python loop
// calls it) and one fused pass over the gates, instead of a dozen ATen calls issued
// from Python. Same equations, same saved tensors, same order of the products as the
// Python functions (_gru_forward, _gru_backward, _lstm_forward, _lstm_backward), which
// remain the reference and the fallback; trainables/_packed_rnn_cpp.py builds this
// file on first use. Rows of step t are `sizes[t]` packed rows from `offsets[t]`.
// The headers it uses, not <torch/extension.h> (all of torch's C++ API): half the
// compile time (12 s instead of 26 s on a 2-core machine), which a first search waits for.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <vector>

namespace {

using Steps = std::vector<int64_t>;

template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Visit the steps as (first packed row, rows): the forward of the forward direction runs
// t = 0..T-1, its backward T-1..0; the reverse direction the other way round.
template <typename Step>
void each_step(const Steps& sizes, const Steps& offsets, bool last_first, Step step) {
  const int64_t count = static_cast<int64_t>(sizes.size());
  for (int64_t k = 0; k < count; ++k) {
    const int64_t t = last_first ? count - 1 - k : k;
    step(offsets[t], sizes[t]);
  }
}

// h @ packed.T by oneDNN, `packed` a weight laid out for it (_Products: torch's
// mkldnn::_reorder_linear_weight of the (out, in) weight). Called boxed, through the
// dispatcher: the operator has no C++ API of its own.
at::Tensor onednn_linear(const at::Tensor& h, const at::Tensor& packed) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  torch::jit::Stack stack{h, packed, c10::IValue(), c10::IValue(std::string("none")),
                          c10::IValue(c10::List<std::optional<at::Scalar>>()), c10::IValue()};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// out = h @ w.T, the product in w's dtype (bfloat16: rounded to it, accumulated in
// float32, as _Products.step), or by oneDNN when w is laid out for it; the gate pass
// adds the bias (addmm would first copy the broadcast bias into `out`: a copy per step
// that took more time than the pass)
void step_product(const at::Tensor& h, const at::Tensor& w, at::Tensor out) {
  if (w.is_mkldnn()) {
    out.copy_(onednn_linear(h, w));
  } else if (w.scalar_type() == h.scalar_type()) {
    at::mm_out(out, h, w.t());
  } else {
    out.copy_(at::mm(h.to(w.scalar_type()), w.t()));
  }
}

// out (+)= d @ w: the backward's carry into the previous state, added to what `out`
// holds with `add` (as _Products.back); by oneDNN when w is w.T laid out for it
void back_product(const at::Tensor& d, const at::Tensor& w, at::Tensor out, bool add) {
  if (w.is_mkldnn()) {
    const auto product = onednn_linear(d, w);
    add ? out.add_(product) : out.copy_(product);
  } else if (w.scalar_type() == d.scalar_type()) {
    if (add) {
      out.addmm_(d, w);
    } else {
      at::mm_out(out, d, w);
    }
  } else if (add) {
    out.add_(at::mm(d.to(w.scalar_type()), w));
  } else {
    out.copy_(at::mm(d.to(w.scalar_type()), w));
  }
}

// ---- GRU ----------------------------------------------------------------------------

template <typename T>
void gru_step_forward(int64_t rows, int64_t n, const T* gi, const T* bias, T* gh, T* rz,
                      T* cand, T* h, T* out, T* h_prev) {
  for (int64_t b = 0; b < rows; ++b) {
    const T* x = gi + b * 3 * n;
    T* y = gh + b * 3 * n;  // W_h h on entry; W_h h + b_h (what the backward reads) after
    T* g = rz + b * 2 * n;
    T* c = cand + b * n;
    T* s = h + b * n;
    T* o = out + b * n;
    T* p = h_prev + b * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const T yr = y[j] + bias[j], yz = y[n + j] + bias[n + j];
      const T yn = y[2 * n + j] + bias[2 * n + j];
      const T r = sigmoid(x[j] + yr);
      const T z = sigmoid(x[n + j] + yz);
      const T m = std::tanh(x[2 * n + j] + r * yn);
      y[j] = yr;
      y[n + j] = yz;
      y[2 * n + j] = yn;
      const T prev = s[j];
      const T next = m + z * (prev - m);
      g[j] = r;
      g[n + j] = z;
      c[j] = m;
      p[j] = prev;
      o[j] = next;
      s[j] = next;
    }
  }
}

std::vector<at::Tensor> gru_forward(const at::Tensor& gi, const at::Tensor& w_hh,
                                    const at::Tensor& w_mm, const at::Tensor& b_hh,
                                    const Steps& sizes, const Steps& offsets, bool reverse) {
  const int64_t n = w_hh.size(1), total = gi.size(0);
  const auto bias = b_hh.contiguous();
  auto out = at::empty({total, n}, gi.options());
  auto h_prev = at::empty({total, n}, gi.options());
  auto gh = at::empty({total, 3 * n}, gi.options());
  auto rz = at::empty({total, 2 * n}, gi.options());
  auto cand = at::empty({total, n}, gi.options());
  auto h = at::zeros({sizes.empty() ? 0 : sizes[0], n}, gi.options());
  each_step(sizes, offsets, reverse, [&](int64_t off, int64_t rows) {
    step_product(h.narrow(0, 0, rows), w_mm, gh.narrow(0, off, rows));
    AT_DISPATCH_FLOATING_TYPES(gi.scalar_type(), "gru_forward", [&] {
      gru_step_forward<scalar_t>(
          rows, n, gi.data_ptr<scalar_t>() + off * 3 * n, bias.data_ptr<scalar_t>(),
          gh.data_ptr<scalar_t>() + off * 3 * n,
          rz.data_ptr<scalar_t>() + off * 2 * n, cand.data_ptr<scalar_t>() + off * n,
          h.data_ptr<scalar_t>(), out.data_ptr<scalar_t>() + off * n,
          h_prev.data_ptr<scalar_t>() + off * n);
    });
  });
  return {out, h_prev, gh, rz, cand};
}

template <typename T>
void gru_step_backward(int64_t rows, int64_t n, const T* grad, const T* h_prev, const T* gh,
                       const T* rz, const T* cand, T* d_h, T* d_gi, T* d_gh) {
  for (int64_t b = 0; b < rows; ++b) {
    const T* go = grad + b * n;
    const T* p = h_prev + b * n;
    const T* y = gh + b * 3 * n;
    const T* g = rz + b * 2 * n;
    const T* c = cand + b * n;
    T* dh = d_h + b * n;
    T* dx = d_gi + b * 3 * n;
    T* dy = d_gh + b * 3 * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const T r = g[j], z = g[n + j], m = c[j];
      const T d = dh[j] + go[j];
      const T d_n = d * (T(1) - z) * (T(1) - m * m);  // through tanh
      const T d_z = d * (p[j] - m) * z * (T(1) - z);
      const T d_r = d_n * y[2 * n + j] * r * (T(1) - r);
      dx[j] = d_r;
      dx[n + j] = d_z;
      dx[2 * n + j] = d_n;
      dy[j] = d_r;
      dy[n + j] = d_z;
      dy[2 * n + j] = d_n * r;
      dh[j] = d * z;  // the carry; the product with w_hh is added after the pass
    }
  }
}

std::vector<at::Tensor> gru_backward(const at::Tensor& w_mm, const at::Tensor& h_prev,
                                     const at::Tensor& gh, const at::Tensor& rz,
                                     const at::Tensor& cand, const at::Tensor& grad_out,
                                     const Steps& sizes, const Steps& offsets, bool reverse) {
  const int64_t n = h_prev.size(1), total = grad_out.size(0);
  auto d_gi = at::empty({total, 3 * n}, grad_out.options());
  auto d_gh = at::empty({total, 3 * n}, grad_out.options());
  auto d_h = at::zeros({sizes.empty() ? 0 : sizes[0], n}, grad_out.options());
  each_step(sizes, offsets, !reverse, [&](int64_t off, int64_t rows) {
    AT_DISPATCH_FLOATING_TYPES(grad_out.scalar_type(), "gru_backward", [&] {
      gru_step_backward<scalar_t>(
          rows, n, grad_out.data_ptr<scalar_t>() + off * n, h_prev.data_ptr<scalar_t>() + off * n,
          gh.data_ptr<scalar_t>() + off * 3 * n, rz.data_ptr<scalar_t>() + off * 2 * n,
          cand.data_ptr<scalar_t>() + off * n, d_h.data_ptr<scalar_t>(),
          d_gi.data_ptr<scalar_t>() + off * 3 * n, d_gh.data_ptr<scalar_t>() + off * 3 * n);
    });
    back_product(d_gh.narrow(0, off, rows), w_mm, d_h.narrow(0, 0, rows), true);
  });
  return {d_gi, d_gh};
}

// ---- LSTM ---------------------------------------------------------------------------

template <typename T>
void lstm_step_forward(int64_t rows, int64_t n, const T* gi, const T* bias, T* gates,
                       T* tanh_c, T* h, T* c, T* out, T* h_prev, T* c_prev) {
  for (int64_t b = 0; b < rows; ++b) {
    const T* x = gi + b * 4 * n;
    T* g = gates + b * 4 * n;  // holds W_h h on entry
    T* tc = tanh_c + b * n;
    T* s = h + b * n;
    T* cs = c + b * n;
    T* o = out + b * n;
    T* hp = h_prev + b * n;
    T* cp = c_prev + b * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const T i = sigmoid((g[j] + bias[j]) + x[j]);
      const T f = sigmoid((g[n + j] + bias[n + j]) + x[n + j]);
      const T m = std::tanh((g[2 * n + j] + bias[2 * n + j]) + x[2 * n + j]);
      const T og = sigmoid((g[3 * n + j] + bias[3 * n + j]) + x[3 * n + j]);
      const T prev_c = cs[j];
      const T next_c = f * prev_c + i * m;
      const T t = std::tanh(next_c);
      const T next_h = og * t;
      g[j] = i;
      g[n + j] = f;
      g[2 * n + j] = m;
      g[3 * n + j] = og;
      hp[j] = s[j];
      cp[j] = prev_c;
      tc[j] = t;
      cs[j] = next_c;
      s[j] = next_h;
      o[j] = next_h;
    }
  }
}

std::vector<at::Tensor> lstm_forward(const at::Tensor& gi, const at::Tensor& w_hh,
                                     const at::Tensor& w_mm, const at::Tensor& b_hh,
                                     const Steps& sizes, const Steps& offsets, bool reverse) {
  const int64_t n = w_hh.size(1), total = gi.size(0);
  const auto bias = b_hh.contiguous();
  auto out = at::empty({total, n}, gi.options());
  auto h_prev = at::empty({total, n}, gi.options());
  auto c_prev = at::empty({total, n}, gi.options());
  auto gates = at::empty({total, 4 * n}, gi.options());
  auto tanh_c = at::empty({total, n}, gi.options());
  const int64_t first = sizes.empty() ? 0 : sizes[0];
  auto h = at::zeros({first, n}, gi.options());
  auto c = at::zeros({first, n}, gi.options());
  each_step(sizes, offsets, reverse, [&](int64_t off, int64_t rows) {
    step_product(h.narrow(0, 0, rows), w_mm, gates.narrow(0, off, rows));
    AT_DISPATCH_FLOATING_TYPES(gi.scalar_type(), "lstm_forward", [&] {
      lstm_step_forward<scalar_t>(
          rows, n, gi.data_ptr<scalar_t>() + off * 4 * n, bias.data_ptr<scalar_t>(),
          gates.data_ptr<scalar_t>() + off * 4 * n, tanh_c.data_ptr<scalar_t>() + off * n,
          h.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(), out.data_ptr<scalar_t>() + off * n,
          h_prev.data_ptr<scalar_t>() + off * n, c_prev.data_ptr<scalar_t>() + off * n);
    });
  });
  return {out, h_prev, c_prev, gates, tanh_c};
}

template <typename T>
void lstm_step_backward(int64_t rows, int64_t n, const T* grad, const T* c_prev, const T* gates,
                        const T* tanh_c, T* d_h, T* d_c, T* d_gates) {
  for (int64_t b = 0; b < rows; ++b) {
    const T* go = grad + b * n;
    const T* cp = c_prev + b * n;
    const T* g = gates + b * 4 * n;
    const T* tc = tanh_c + b * n;
    T* dh = d_h + b * n;
    T* dcs = d_c + b * n;
    T* dg = d_gates + b * 4 * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const T i = g[j], f = g[n + j], m = g[2 * n + j], o = g[3 * n + j], t = tc[j];
      const T d = dh[j] + go[j];
      const T dc = dcs[j] + d * o * (T(1) - t * t);
      dg[j] = dc * m * (i * (T(1) - i));
      dg[n + j] = dc * cp[j] * (f * (T(1) - f));
      dg[2 * n + j] = dc * i * (T(1) - m * m);
      dg[3 * n + j] = d * t * (o * (T(1) - o));
      dcs[j] = dc * f;  // d_h: the product with w_hh, after the pass
    }
  }
}

std::vector<at::Tensor> lstm_backward(const at::Tensor& w_mm, const at::Tensor& c_prev,
                                      const at::Tensor& gates, const at::Tensor& tanh_c,
                                      const at::Tensor& grad_out, const Steps& sizes,
                                      const Steps& offsets, bool reverse) {
  const int64_t n = c_prev.size(1), total = grad_out.size(0);
  auto d_gates = at::empty({total, 4 * n}, grad_out.options());
  const int64_t first = sizes.empty() ? 0 : sizes[0];
  auto d_h = at::zeros({first, n}, grad_out.options());
  auto d_c = at::zeros({first, n}, grad_out.options());
  each_step(sizes, offsets, !reverse, [&](int64_t off, int64_t rows) {
    AT_DISPATCH_FLOATING_TYPES(grad_out.scalar_type(), "lstm_backward", [&] {
      lstm_step_backward<scalar_t>(
          rows, n, grad_out.data_ptr<scalar_t>() + off * n, c_prev.data_ptr<scalar_t>() + off * n,
          gates.data_ptr<scalar_t>() + off * 4 * n, tanh_c.data_ptr<scalar_t>() + off * n,
          d_h.data_ptr<scalar_t>(), d_c.data_ptr<scalar_t>(),
          d_gates.data_ptr<scalar_t>() + off * 4 * n);
    });
    back_product(d_gates.narrow(0, off, rows), w_mm, d_h.narrow(0, 0, rows), false);
  });
  return {d_gates};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // the GIL is released: the two directions run on two threads (_packed_rnn._both)
  auto release = pybind11::call_guard<pybind11::gil_scoped_release>();
  m.def("gru_forward", &gru_forward, release);
  m.def("gru_backward", &gru_backward, release);
  m.def("lstm_forward", &lstm_forward, release);
  m.def("lstm_backward", &lstm_backward, release);
}
