#include "model/param_set.h"

#include <algorithm>

namespace tripod {

namespace {
std::vector<int64_t> packed_offsets(const std::vector<ParamSpec>& specs) {
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const ParamSpec& spec : specs) {
    offsets.push_back(offset);
    offset += shape_numel(spec.shape);
  }
  return offsets;
}
}  // namespace

ParamSet::ParamSet(std::vector<ParamSpec> specs, Backend& backend, DType dtype)
    : ParamSet(specs, backend, dtype, packed_offsets(specs), count_params(specs)) {}

ParamSet::ParamSet(std::vector<ParamSpec> specs, Backend& backend, DType dtype, const std::vector<int64_t>& offsets,
                   int64_t total)
    : specs_(std::move(specs)), offsets_(offsets) {
  check(offsets_.size() == specs_.size(), "ParamSet: ", offsets_.size(), " offsets for ", specs_.size(), " tensors");
  flat_ = backend.alloc({total}, dtype);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    check(index_.emplace(specs_[i].name, i).second, "duplicate parameter name ", specs_[i].name);
    views_.push_back(flat_.view(offsets_[i], specs_[i].shape));
  }
}

const Tensor& ParamSet::operator[](const std::string& name) const {
  auto it = index_.find(name);
  check(it != index_.end(), "no parameter tensor named '", name, "'");
  return views_[it->second];
}

void fill_initial_values(Backend& backend, const ParamSpec& spec, uint64_t seed, int64_t first, const Tensor& dst) {
  constexpr int64_t kChunk = 1 << 20;
  const Tensor flat = dst.reshape({dst.numel()});
  std::vector<double> values;
  for (int64_t done = 0; done < flat.numel(); done += kChunk) {
    const int64_t count = std::min(kChunk, flat.numel() - done);
    values.resize(static_cast<std::size_t>(count));
    initial_values(spec, seed, first + done, count, values.data());
    from_host_f64(backend, values, flat.view(done, {count}));
  }
}

void initialise_params(const ParamSet& params, Backend& backend, uint64_t seed) {
  for (std::size_t i = 0; i < params.size(); ++i) fill_initial_values(backend, params.specs()[i], seed, 0, params.at(i));
}

std::vector<std::vector<double>> host_values(Backend& backend, const ParamSet& set) {
  std::vector<std::vector<double>> values;
  for (std::size_t i = 0; i < set.size(); ++i) values.push_back(to_host_f64(backend, set.at(i)));
  return values;
}

}  // namespace tripod
