#include "commbench/collective_bench.h"

#include <algorithm>
#include <vector>

#include "commbench/check_values.h"

namespace tripod::commbench {

namespace {

// The buffers live on the bench's backend (a device, perhaps): written and read through host copies.
template <typename T>
void fill_typed(Backend& backend, const Tensor& t, int rank, int64_t first_index, int seed) {
  std::vector<T> host(static_cast<std::size_t>(t.numel()));
  // Host work that grows with the size (1 GiB: 2^28 elements) runs on the rank's threads.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < t.numel(); ++i) host[static_cast<std::size_t>(i)] = static_cast<T>(input_value(rank, first_index + i, seed));
  backend.upload(host.data(), t);
}

template <typename T>
void fill_sentinel(Backend& backend, const Tensor& t) {
  const std::vector<T> host(static_cast<std::size_t>(t.numel()), static_cast<T>(-1));
  backend.upload(host.data(), t);
}

template <typename T>
std::vector<T> download(Backend& backend, const Tensor& t) {
  std::vector<T> host(static_cast<std::size_t>(t.numel()));
  backend.download(t, host.data());
  return host;
}

// Counts elements of `result` that differ from what the collective's description expects. Only a
// reduction under avg is compared with a tolerance (see check_values.h).
template <typename T>
int64_t count_wrong_typed(Backend& backend, const CollectiveSpec& spec, const Tensor& result, const CallContext& context,
                          int seed) {
  const std::vector<T> got = download<T>(backend, result);
  int64_t wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
  for (int64_t j = 0; j < result.numel(); ++j) {
    const Source source = spec.expected(j, context);
    const bool reduced = source.rank == Source::kReduced;
    const T want = reduced ? reduced_value<T>(context.call.op, context.size, source.index, seed)
                           : static_cast<T>(input_value(source.rank, source.index, seed));
    wrong += !matches<T>(got[static_cast<std::size_t>(j)], want, reduced && context.call.op == ReduceOp::Avg);
  }
  return wrong;
}

template <typename F>
auto by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::BF16: return f(Bf16Value{});
    default: return f(float{});
  }
}

}  // namespace

CollectiveBench::CollectiveBench(Communicator& group, Backend& backend, Collective collective, DType dtype,
                                 int64_t max_bytes, bool blocking)
    : group_(group), backend_(backend), spec_(collective_spec(collective)), dtype_(dtype), blocking_(blocking),
      rank_(group.rank()), size_(group.size()) {
  const BufferElements most = buffer_elements(spec_, dtype, max_bytes, size_);
  send_buffer_ = backend.alloc({most.send}, dtype);
  recv_buffer_ = backend.alloc({most.recv}, dtype);
  scratch_buffer_ = backend.alloc({most.scratch}, dtype);
  set_size(max_bytes);
}

CollectiveBench::BufferElements CollectiveBench::buffer_elements(const CollectiveSpec& spec, DType dtype,
                                                                 int64_t max_bytes, int n) {
  const CollectiveCounts most = spec.counts(max_bytes, static_cast<int>(dtype_size(dtype)), n);
  return {most.send, std::max(most.send, most.recv),  // in place: the whole input fits the receive buffer
          spec.needs_scratch ? most.recv : 0};
}

int64_t CollectiveBench::buffer_bytes(Collective collective, DType dtype, int64_t max_bytes, int n) {
  const BufferElements b = buffer_elements(collective_spec(collective), dtype, max_bytes, n);
  return (b.send + b.recv + b.scratch) * static_cast<int64_t>(dtype_size(dtype));
}

void CollectiveBench::set_size(int64_t requested_bytes) {
  counts_ = spec_.counts(requested_bytes, static_cast<int>(dtype_size(dtype_)), size_);
  check(counts_.send <= send_buffer_.numel() && std::max(counts_.send, counts_.recv) <= recv_buffer_.numel(),
        "bench comm: size ", requested_bytes, " exceeds the buffers allocated for the largest size");
  auto at = [&](Buffer b) -> Tensor& { return views_[static_cast<int>(b)]; };
  at(Buffer::Send) = send_buffer_.view(0, {counts_.send});
  at(Buffer::Recv) = recv_buffer_.view(0, {counts_.recv});
  at(Buffer::Whole) = recv_buffer_.view(0, {std::max(counts_.send, counts_.recv)});
  at(Buffer::Block) = spec_.blocked ? recv_buffer_.view(rank_ * counts_.printed, {counts_.printed}) : Tensor{};
  at(Buffer::Scratch) = scratch_buffer_.view(0, {spec_.needs_scratch ? counts_.recv : 0});
}

CallContext CollectiveBench::context(const CollectiveCall& call) const {
  return CallContext{call, rank_, size_, counts_.printed};
}

void CollectiveBench::run(const CollectiveCall& call) {
  const BufferRoles roles = spec_.roles(context(call));
  spec_.run(RunArgs{group_, backend_, view(roles.input), view(roles.output), call, blocking_});
}

void CollectiveBench::fill(const CollectiveCall& call, int seed) {
  const BufferRoles roles = spec_.roles(context(call));
  by_dtype(dtype_, [&](auto zero) {
    using T = decltype(zero);
    for (Buffer b : {Buffer::Send, Buffer::Whole, Buffer::Scratch}) fill_sentinel<T>(backend_, view(b));
    if (roles.input != Buffer::None) fill_typed<T>(backend_, view(roles.input), rank_, roles.first_index, seed);
    return 0;
  });
}

int64_t CollectiveBench::count_wrong(const CollectiveCall& call, int seed) const {
  const CallContext ctx = context(call);
  const Tensor& checked = view(spec_.roles(ctx).checked);
  if (!checked.defined()) return 0;
  return by_dtype(dtype_, [&](auto zero) { return count_wrong_typed<decltype(zero)>(backend_, spec_, checked, ctx, seed); });
}

bool CollectiveBench::corrupt_result(const CollectiveCall& call) {
  const Tensor& checked = view(spec_.roles(context(call)).checked);
  if (!checked.defined() || checked.numel() == 0) return false;
  by_dtype(dtype_, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> host = download<T>(backend_, checked);
    host[0] += static_cast<T>(1000);
    backend_.upload(host.data(), checked);
    return 0;
  });
  return true;
}

}  // namespace tripod::commbench
