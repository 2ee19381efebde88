// A set of named tensors laid out in one flat allocation, in ParamSpec order: the model's
// parameters, their gradients, or an optimizer moment. One flat buffer makes zeroing, norms and
// (later) bucketed communication single operations over contiguous memory.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/transfer.h"
#include "model/param_spec.h"

namespace tripod {

class ParamSet {
 public:
  ParamSet(std::vector<ParamSpec> specs, Backend& backend, DType dtype);  // zero-filled, packed
  // A padded layout: tensor i starts at offsets[i] of a flat buffer of `total` elements (the gaps
  // are zero padding, e.g. to make communication buckets divide evenly among ranks).
  ParamSet(std::vector<ParamSpec> specs, Backend& backend, DType dtype, const std::vector<int64_t>& offsets,
           int64_t total);

  const Tensor& flat() const { return flat_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::size_t size() const { return specs_.size(); }
  const Tensor& at(std::size_t index) const { return views_[index]; }
  const Tensor& operator[](const std::string& name) const;  // throws naming the missing tensor
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  int64_t offset(std::size_t index) const { return offsets_[index]; }  // element offset in flat()
  DType dtype() const { return flat_.dtype(); }

 private:
  std::vector<ParamSpec> specs_;
  Tensor flat_;
  std::vector<Tensor> views_;
  std::vector<int64_t> offsets_;
  std::unordered_map<std::string, std::size_t> index_;
};

// Every tensor of `set` copied to the host as doubles, in spec order (references and comparisons).
std::vector<std::vector<double>> host_values(Backend& backend, const ParamSet& set);

// Writes every tensor's layout-independent initial values (see initial_values) into `params`.
void initialise_params(const ParamSet& params, Backend& backend, uint64_t seed);
// Writes elements [first, first + dst.numel()) of `spec`'s initial values into `dst`, in chunks, so
// the host buffer stays small whatever the tensor's size.
void fill_initial_values(Backend& backend, const ParamSpec& spec, uint64_t seed, int64_t first, const Tensor& dst);

}  // namespace tripod
