#include "optim/adamw.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace tripod {

DecayPolicy parse_decay_policy(const std::string& name) {
  if (name == "matrices") return DecayPolicy::Matrices;
  if (name == "matrices-except-embeddings") return DecayPolicy::MatricesExceptEmbeddings;
  if (name == "all") return DecayPolicy::All;
  if (name == "none") return DecayPolicy::None;
  fail("unknown optim.decay_tensors '", name, "' (expected matrices, matrices-except-embeddings, all or none)");
}

bool decays(const ParamSpec& spec, DecayPolicy policy) {
  switch (policy) {
    case DecayPolicy::Matrices: return spec.decay;
    case DecayPolicy::MatricesExceptEmbeddings:
      return spec.decay && spec.group != embedding_group();
    case DecayPolicy::All: return true;
    case DecayPolicy::None: return false;
  }
  return false;
}

AdamW::AdamW(const std::vector<ParamSpec>& specs, Backend& backend, DType dtype, AdamWConfig config)
    : backend_(backend), config_(config), m_(specs, backend, dtype), v_(specs, backend, dtype) {}

namespace {

// Whether tensor i of `set` starts where tensor i - 1 ends in its flat buffer.
bool follows_previous(const ParamSet& set, std::size_t i) {
  return set.offset(i) == set.offset(i - 1) + set.at(i - 1).numel();
}

}  // namespace

void AdamW::update(const ParamSet& params, const ParamSet& grads, double lr, int64_t step, double grad_scale) {
  check(grads.size() == params.size(), "AdamW::update: ", grads.size(), " gradients for ", params.size(),
        " parameter tensors");
  auto weight_decay = [&](std::size_t i) {
    return decays(params.specs()[i], config_.decay_policy) ? config_.weight_decay : 0.0;
  };
  // A run of consecutive tensors with the same weight decay, back to back in all four buffers, is
  // one span: AdamW is elementwise with the same coefficients, so the bits are those of a call a
  // tensor, with fewer parallel regions on the CPU. Where the four buffers lay the tensors out
  // alike (they do: one set of specs), the runs go to the backend together, which a device updates
  // in one launch (GPT-2 124M: 148 tensors, 98 runs, one launch instead of 98).
  bool same_layout = params.flat().numel() == grads.flat().numel() && params.flat().numel() == m_.flat().numel() &&
                     params.flat().numel() == v_.flat().numel();
  std::vector<AdamWRun> runs;
  std::vector<std::size_t> firsts;
  for (std::size_t first = 0, end = 0; first < params.size(); first = end) {
    const double wd = weight_decay(first);
    int64_t length = params.at(first).numel();
    for (end = first + 1; end < params.size() && weight_decay(end) == wd && follows_previous(params, end) &&
                          follows_previous(grads, end) && follows_previous(m_, end) && follows_previous(v_, end);
         ++end)
      length += params.at(end).numel();
    const int64_t offset = params.offset(first);
    same_layout = same_layout && grads.offset(first) == offset && m_.offset(first) == offset && v_.offset(first) == offset;
    runs.push_back({offset, length, wd});
    firsts.push_back(first);
  }
  if (same_layout)
    return backend_.adamw_runs(params.flat(), grads.flat(), m_.flat(), v_.flat(), runs, lr, config_.beta1,
                               config_.beta2, config_.eps, step, grad_scale);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto span = [&](const ParamSet& set) { return set.flat().view(set.offset(firsts[i]), {runs[i].length}); };
    backend_.adamw(span(params), span(grads), span(m_), span(v_), lr, config_.beta1, config_.beta2, config_.eps,
                   runs[i].weight_decay, step, grad_scale);
  }
}

std::string nonfinite_tensors(Backend& backend, const ParamSet& set) {
  const Tensor counts = backend.alloc({static_cast<int64_t>(set.size())}, DType::F64);
  for (std::size_t i = 0; i < set.size(); ++i) backend.count_nonfinite(counts.view(static_cast<int64_t>(i), {1}), set.at(i));
  const std::vector<double> host = to_host_f64(backend, counts);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < set.size(); ++i)
    if (host[i] > 0) names.push_back(set.specs()[i].name);
  return names.empty() ? "none" : name_list(names);
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

}  // namespace tripod
