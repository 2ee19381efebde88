#include "cli/bench_comm_collectives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tripod::cli {

std::string nccl_type_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32";
    default: return dtype_name(dtype);
  }
}

DType parse_nccl_type(const std::string& name) {
  if (name == "float" || name == "float32" || name == "fp32") return DType::F32;
  if (name == "double" || name == "float64" || name == "fp64") return DType::F64;
  if (name == "int32" || name == "int") return DType::I32;
  fail("unsupported datatype '", name, "' (expected float, double, int32 or all)");
}

namespace {

int64_t input_value(int rank, int64_t index, int seed) { return 1 + (index + 7 * rank + 13 * seed) % 61; }

// The reduction over the group of every rank's input at `index`, computed in T as MPI does (the
// sum is exact; avg divides it once by n).
template <typename T>
T reduced_value(ReduceOp op, int n, int64_t index, int seed) {
  int64_t sum = 0, lo = input_value(0, index, seed), hi = lo;
  for (int r = 0; r < n; ++r) {
    const int64_t v = input_value(r, index, seed);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (op) {
    case ReduceOp::Sum: return static_cast<T>(sum);
    case ReduceOp::Avg: return static_cast<T>(sum) / static_cast<T>(n);
    case ReduceOp::Max: return static_cast<T>(hi);
    case ReduceOp::Min: return static_cast<T>(lo);
  }
  return T{};
}

template <typename T>
bool matches(T got, T want, bool approximate) {
  if (!approximate) return got == want;
  const double tolerance = sizeof(T) == 4 ? 1e-6 : 1e-14;  // a few ulps of float / double
  return std::abs(static_cast<double>(got) - static_cast<double>(want)) <= tolerance * std::abs(static_cast<double>(want));
}

// The buffers live on the bench's backend (a device, perhaps): written and read through host copies.
template <typename T>
void fill_typed(Backend& backend, const Tensor& t, int rank, int64_t first_index, int seed) {
  std::vector<T> host(static_cast<std::size_t>(t.numel()));
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

// Counts elements of `result` that differ from expected(j), j = 0..numel-1.
template <typename T, typename Expected>
int64_t count_mismatches(Backend& backend, const Tensor& result, bool approximate, Expected expected) {
  const std::vector<T> p = download<T>(backend, result);
  int64_t wrong = 0;
  for (int64_t j = 0; j < result.numel(); ++j) wrong += !matches<T>(p[static_cast<std::size_t>(j)], expected(j), approximate);
  return wrong;
}

template <typename T>
int64_t count_wrong_typed(Backend& backend, Collective c, const Tensor& result, const CollectiveCall& call, int rank,
                          int n, int64_t block, int seed) {
  const bool approximate = call.op == ReduceOp::Avg && is_reduction(c);
  auto own = [&](int from, int64_t index) { return static_cast<T>(input_value(from, index, seed)); };
  switch (c) {
    case Collective::AllReduce:
    case Collective::Reduce:
      return count_mismatches<T>(backend, result, approximate, [&](int64_t j) { return reduced_value<T>(call.op, n, j, seed); });
    case Collective::ReduceScatter:
      return count_mismatches<T>(backend, result, approximate,
                                 [&](int64_t j) { return reduced_value<T>(call.op, n, rank * block + j, seed); });
    case Collective::AllGather:  // block s came from rank s, which indexed it from s*block
      return count_mismatches<T>(backend, result, false, [&](int64_t j) { return own(static_cast<int>(j / block), j); });
    case Collective::AllToAll:  // block s came from rank s's block `rank`
      return count_mismatches<T>(backend, result, false, [&](int64_t j) {
        return own(static_cast<int>(j / block), rank * block + j % block);
      });
    case Collective::Broadcast:
      return count_mismatches<T>(backend, result, false, [&](int64_t j) { return own(call.root, j); });
    case Collective::SendRecv:
      return count_mismatches<T>(backend, result, false, [&](int64_t j) { return own((rank - 1 + n) % n, j); });
  }
  return 0;
}

template <typename F>
auto by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    default: return f(float{});
  }
}

}  // namespace

CollectiveBench::CollectiveBench(Communicator& group, Backend& backend, Collective collective, DType dtype,
                                 int64_t max_bytes, bool blocking)
    : group_(group), backend_(backend), collective_(collective), dtype_(dtype), blocking_(blocking),
      rank_(group.rank()), size_(group.size()) {
  const CollectiveCounts most = collective_counts(collective, max_bytes, static_cast<int>(dtype_size(dtype)), size_);
  send_buffer_ = backend.alloc({most.send}, dtype);
  recv_buffer_ = backend.alloc({std::max(most.send, most.recv)}, dtype);  // in place: the whole input fits
  scratch_buffer_ = backend.alloc({collective == Collective::SendRecv ? most.recv : 0}, dtype);
  set_size(max_bytes);
}

void CollectiveBench::set_size(int64_t requested_bytes) {
  counts_ = collective_counts(collective_, requested_bytes, static_cast<int>(dtype_size(dtype_)), size_);
  check(counts_.send <= send_buffer_.numel() && std::max(counts_.send, counts_.recv) <= recv_buffer_.numel(),
        "bench comm: size ", requested_bytes, " exceeds the buffers allocated for the largest size");
  send_ = send_buffer_.view(0, {counts_.send});
  recv_ = recv_buffer_.view(0, {counts_.recv});
  whole_ = recv_buffer_.view(0, {std::max(counts_.send, counts_.recv)});
  const bool blocked = collective_ == Collective::AllGather || collective_ == Collective::ReduceScatter;
  block_ = blocked ? recv_buffer_.view(rank_ * counts_.printed, {counts_.printed}) : Tensor{};  // this rank's block
  scratch_ = scratch_buffer_.view(0, {collective_ == Collective::SendRecv ? counts_.recv : 0});
}

Tensor CollectiveBench::input(const CollectiveCall& call) const {
  if (!call.in_place) return send_;
  switch (collective_) {
    case Collective::AllGather: return block_;
    case Collective::ReduceScatter: return whole_;
    default: return recv_;
  }
}

Tensor CollectiveBench::result(const CollectiveCall& call) const {
  switch (collective_) {
    case Collective::ReduceScatter: return call.in_place ? block_ : recv_;
    case Collective::Reduce: return rank_ == call.root ? recv_ : Tensor{};
    case Collective::Broadcast: return !call.in_place && rank_ == call.root ? send_ : recv_;
    default: return recv_;
  }
}

void CollectiveBench::run(const CollectiveCall& call) {
  const Tensor in = input(call);
  const Tensor& out = collective_ == Collective::ReduceScatter && call.in_place ? block_ : recv_;
  Communicator& g = group_;
  switch (collective_) {
    case Collective::AllReduce:
      blocking_ ? g.all_reduce(in, out, call.op) : g.all_reduce_async(in, out, call.op)->wait();
      break;
    case Collective::ReduceScatter:
      blocking_ ? g.reduce_scatter(in, out, call.op) : g.reduce_scatter_async(in, out, call.op)->wait();
      break;
    case Collective::AllGather:
      blocking_ ? g.all_gather(in, out) : g.all_gather_async(in, out)->wait();
      break;
    case Collective::AllToAll:
      blocking_ ? g.all_to_all(in, out) : g.all_to_all_async(in, out)->wait();
      break;
    case Collective::Reduce:
      blocking_ ? g.reduce(in, out, call.op, call.root) : g.reduce_async(in, out, call.op, call.root)->wait();
      break;
    case Collective::Broadcast: {
      const Tensor& t = !call.in_place && rank_ == call.root ? send_ : recv_;
      blocking_ ? g.broadcast(t, call.root) : g.broadcast_async(t, call.root)->wait();
      break;
    }
    case Collective::SendRecv: {
      // Both directions must be in flight at once (a blocking send first would deadlock the ring),
      // so sendrecv always uses the async forms.
      const Tensor& into = call.in_place ? scratch_ : recv_;
      auto sent = g.send_async(in, (rank_ + 1) % size_, 0);
      auto received = g.recv_async(into, (rank_ - 1 + size_) % size_, 0);
      sent->wait();
      received->wait();
      if (call.in_place && into.bytes() > 0) backend_.copy(into, recv_);
      break;
    }
  }
}

void CollectiveBench::fill(const CollectiveCall& call, int seed) {
  by_dtype(dtype_, [&](auto zero) {
    using T = decltype(zero);
    for (const Tensor& t : {send_, whole_, scratch_}) fill_sentinel<T>(backend_, t);
    const Tensor in = input(call);
    if (collective_ == Collective::Broadcast && rank_ != call.root) return 0;  // only the root has data
    const int64_t first = collective_ == Collective::AllGather ? rank_ * counts_.printed : 0;
    fill_typed<T>(backend_, in, rank_, first, seed);
    return 0;
  });
}

int64_t CollectiveBench::count_wrong(const CollectiveCall& call, int seed) const {
  const Tensor checked = result(call);
  if (!checked.defined()) return 0;
  return by_dtype(dtype_, [&](auto zero) {
    return count_wrong_typed<decltype(zero)>(backend_, collective_, checked, call, rank_, size_, counts_.printed, seed);
  });
}

bool CollectiveBench::corrupt_result(const CollectiveCall& call) {
  const Tensor checked = result(call);
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

}  // namespace tripod::cli
