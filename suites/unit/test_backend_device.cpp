// The device boundary: host code cannot read an emulated device's memory, backends refuse tensors
// of another device, and the factory makes backends by name only. Then the emulated-device backend
// against the CPU backend: the same training steps give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

#include "backend/backend_factory.h"
#include "backend/transfer.h"
#include "core/host_memory.h"
#include "model_test_util.h"
#include "optim/adamw.h"
#include "support/error_text.h"
#include "train/trainer.h"

namespace tripod {
namespace {

TEST(DeviceGuard, HostReadsOfEmulatedDeviceMemoryFailNamingTheTensor) {
  auto device = make_emulated_backend();
  Tensor t = device->alloc({3, 4}, DType::F32);
  EXPECT_EQ(t.device(), Device::Emulated);
  for (const std::string& message :
       {error_of([&] { (void)t.data<float>(); }), error_of([&] { (void)t.raw(); }),
        error_of([&] { (void)t.view(4, {4}).data<float>(); })}) {
    EXPECT_NE(message.find("host access"), std::string::npos) << message;
    EXPECT_NE(message.find("on the emulated device"), std::string::npos) << message;
    EXPECT_NE(message.find("fp32"), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { (void)t.data<float>(); }).find("[3, 4]"), std::string::npos);
  // The way in and out is the backend's.
  const std::vector<double> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  from_host_f64(*device, values, t);
  EXPECT_EQ(to_host_f64(*device, t), values);
  // Host tensors stay readable; a CPU backend's tensors are host memory.
  EXPECT_NO_THROW((void)host_alloc({2}, DType::F64).data<double>());
  EXPECT_NO_THROW((void)make_cpu_backend()->alloc({2}, DType::F64).data<double>());
}

TEST(DeviceGuard, BackendsRefuseTensorsOfAnotherDevice) {
  auto device = make_emulated_backend();
  auto cpu = make_cpu_backend();
  const Tensor host = host_alloc({4}, DType::F32), on_device = device->alloc({4}, DType::F32);
  std::string m = error_of([&] { device->scale(host, 2.0); });
  EXPECT_NE(m.find("scale"), std::string::npos) << m;
  EXPECT_NE(m.find("fp32 [4] on the host"), std::string::npos) << m;
  m = error_of([&] { cpu->add(on_device, on_device, on_device); });
  EXPECT_NE(m.find("on the emulated device"), std::string::npos) << m;
  m = error_of([&] { device->copy(host, on_device); });
  EXPECT_NE(m.find("copy"), std::string::npos) << m;
}

TEST(Allocation, NegativeAndOverflowingShapesAreRefusedBeforeAllocating) {
  // An overflowed batch x sequence product came as shape [-64, 128]: its byte count wrapped to
  // 2^64 - 32768 and the error blamed memory ("out of host memory allocating 18446744073709518848 bytes").
  auto cpu = make_cpu_backend();
  auto device = make_emulated_backend();
  for (const auto& alloc : std::vector<std::function<Tensor(const Shape&)>>{
           [](const Shape& s) { return host_alloc(s, DType::F32); },
           [&](const Shape& s) { return cpu->alloc(s, DType::F32); },
           [&](const Shape& s) { return device->alloc(s, DType::F32); }}) {
    std::string m = error_of([&] { alloc({-64, 128}); });
    EXPECT_NE(m.find("cannot allocate a tensor of shape [-64, 128]: negative dimension"), std::string::npos) << m;
    m = error_of([&] { alloc({int64_t{1} << 31, int64_t{1} << 31}); });  // 2^62 elements: 2^64 bytes
    EXPECT_NE(m.find("[2147483648, 2147483648] of fp32: more than 2^62 bytes"), std::string::npos) << m;
    EXPECT_EQ(alloc({0, int64_t{1} << 40}).bytes(), 0u);
    EXPECT_EQ(alloc({3, 5}).bytes(), 60u);
  }
  EXPECT_EQ(allocation_bytes({int64_t{1} << 30, 4}, DType::F64), std::size_t{1} << 35);
}

TEST(BackendFactory, MakesBuiltBackendsByNameAndNamesThemOnError) {
  EXPECT_EQ(make_backend("cpu")->device(), Device::Host);
  EXPECT_EQ(make_backend("emulated")->device(), Device::Emulated);
  std::string m = error_of([] { make_backend("tpu"); });
  EXPECT_NE(m.find("unknown backend 'tpu'"), std::string::npos) << m;
  EXPECT_NE(m.find("cpu, emulated"), std::string::npos) << m;
  m = error_of([] { make_backend("cuda"); });
#ifdef TRIPOD_HAVE_CUDA_BACKEND
  // Built (nvcc was found): made where a GPU is, a clear error where none is.
  if (m != "no error") EXPECT_NE(m.find("backend 'cuda': no usable CUDA device"), std::string::npos) << m;
#else
  EXPECT_NE(m.find("not built into this binary"), std::string::npos) << m;
#endif
}

#ifdef TRIPOD_HAVE_CUDA_BACKEND
// The CUDA backend asks for 32 hardware work queues before the runtime starts (more streams than
// queues can deadlock NCCL receives against sends), unless the user chose a number.
TEST(BackendFactory, CudaAsksForEveryHardwareQueueUnlessTheUserChose) {
  const char* before = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const std::string saved = before ? before : "";
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  error_of([] { make_backend("cuda"); });  // made, or "no usable CUDA device": either way it was asked
  ASSERT_NE(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), nullptr);
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "32");
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
  error_of([] { make_backend("cuda"); });
  EXPECT_STREQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), "4");
  if (before) setenv("CUDA_DEVICE_MAX_CONNECTIONS", saved.c_str(), 1);
  else unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}
#endif

TEST(DeviceScalars, SumsOfSquaresCountsAndLossSumsStayOnTheDevice) {
  for (const std::string& name : {"cpu", "emulated"}) {
    auto be = make_backend(name);
    Tensor x = be->alloc({5}, DType::F32), acc = alloc_scalar(*be);
    from_host_f64(*be, {1, -2, 3, 0.5, 0}, x);
    be->sum_squares(acc, x);
    be->sum_squares(acc, x);  // accumulates
    EXPECT_EQ(read_scalar(*be, acc), 2 * (1 + 4 + 9 + 0.25));
    Tensor count = alloc_scalar(*be);
    from_host_f64(*be, {1, std::numeric_limits<double>::infinity(), 3, std::nan(""), 0}, x);
    be->count_nonfinite(count, x);
    EXPECT_EQ(read_scalar(*be, count), 2);
    Tensor targets = be->alloc({5}, DType::I32), sum = alloc_scalar(*be);
    const int32_t ids[5] = {3, -1, 0, -1, 7};
    be->upload(ids, targets);
    from_host_f64(*be, {0.25, 100, 0.5, 100, 2}, x);
    be->sum_valid_losses(sum, x, targets);
    EXPECT_EQ(read_scalar(*be, sum), 2.75);
  }
}

TEST(DeviceScalars, ANonFiniteGradientIsNamed) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto be = make_emulated_backend();
  Trainer trainer(config, *be);
  trainer.initialise();
  EXPECT_EQ(nonfinite_tensors(*be, trainer.grads()), "none");
  from_host_f64(*be, {std::numeric_limits<double>::infinity()}, trainer.grads()["h.1.mlp.c_fc.bias"].view(3, {1}));
  EXPECT_EQ(nonfinite_tensors(*be, trainer.grads()), "h.1.mlp.c_fc.bias");
  // Every gradient non-finite (a diverged step): the first eight named and the rest counted, one
  // readable line instead of every tensor of the model.
  for (std::size_t i = 0; i < trainer.grads().size(); ++i)
    from_host_f64(*be, {std::numeric_limits<double>::quiet_NaN()}, trainer.grads().at(i).view(0, {1}));
  const std::string all = nonfinite_tensors(*be, trainer.grads());
  const std::size_t n = trainer.grads().size();
  EXPECT_EQ(all.rfind(trainer.grads().specs()[0].name + ", ", 0), 0u) << all;
  EXPECT_NE(all.find(str_cat(" and ", n - 8, " more (", n, " in all)")), std::string::npos) << all;
  EXPECT_EQ(all.find(trainer.grads().specs()[8].name), std::string::npos) << all;
}

// gather_rows / scatter_add_rows, the packing of a sparse gradient's rows: by id, in the ids' order,
// and ids the CPU backends can check refused with the id named.
TEST(RowIndexing, GathersAndScatterAddsRowsByIdAndRefusesBadIds) {
  auto be = make_emulated_backend();
  Tensor table = be->alloc({5, 3}, DType::F64), packed = be->alloc({3, 3}, DType::F64);
  std::vector<double> values(15);
  for (int i = 0; i < 15; ++i) values[static_cast<std::size_t>(i)] = i;
  from_host_f64(*be, values, table);
  auto ids = [&](std::vector<int32_t> v) {
    Tensor t = be->alloc({static_cast<int64_t>(v.size())}, DType::I32);
    be->upload(v.data(), t);
    return t;
  };
  be->gather_rows(packed, table, ids({4, 0, 2}));
  EXPECT_EQ(to_host_f64(*be, packed), (std::vector<double>{12, 13, 14, 0, 1, 2, 6, 7, 8}));
  be->scatter_add_rows(table, packed, ids({1, 3, 4}));  // rows 1, 3, 4 += rows 4, 0, 2 of the table
  EXPECT_EQ(to_host_f64(*be, table), (std::vector<double>{0, 1, 2, 15, 17, 19, 6, 7, 8, 9, 11, 13, 18, 20, 22}));
  const std::string outside = error_of([&] { be->gather_rows(packed, table, ids({4, 5, 0})); });
  EXPECT_NE(outside.find("gather_rows: id 5 at 1 is outside the table's 5 rows"), std::string::npos) << outside;
  const std::string twice = error_of([&] { be->scatter_add_rows(table, packed, ids({2, 0, 2})); });
  EXPECT_NE(twice.find("scatter_add_rows: id 2 appears twice"), std::string::npos) << twice;
  const std::string shapes = error_of([&] { be->gather_rows(packed, table, ids({0, 1})); });
  EXPECT_NE(shapes.find("gather_rows: expected a table [N, C]"), std::string::npos) << shapes;
}

// Every training step of the emulated device equals the CPU's, bit for bit: the same kernels on
// the same bytes, reached only through uploads and downloads, and through logits whose rows the
// emulated device pads as a GPU does (vocabulary 11 in rows of 16), under every precision.
TEST(EmulatedBackend, TrainsBitIdenticallyToTheCpuBackend) {
  EXPECT_EQ(make_backend("emulated")->gemm_row_multiple(), 8);
  EXPECT_EQ(make_backend("cpu")->gemm_row_multiple(), 1);
  for (const char* dtype : {"fp32", "fp64", "bf16-mixed"})
    for (bool tied : {true, false}) {
      const RunConfig config = testing::tiny_run_config(dtype, tied, /*micro_batches=*/2);
      std::vector<std::vector<double>> results;
      for (const std::string& name : {"cpu", "emulated"}) {
        auto be = make_backend(name);
        Trainer trainer(config, *be);
        trainer.initialise();
        std::vector<double> trace;
        for (int s = 0; s < 4; ++s) {
          const StepResult r = trainer.train_step(testing::random_batch(4, 5, config.model.vocab_size, s));
          trace.push_back(r.loss);
          trace.push_back(r.grad_norm);
        }
        EXPECT_EQ(trainer.model().logits().dim(-1), name == "emulated" ? 16 : 11) << name;
        trace.push_back(trainer.eval_loss(testing::random_batch(4, 5, config.model.vocab_size, 99)));
        const std::vector<double> params = to_host_f64(*be, trainer.params().flat());
        trace.insert(trace.end(), params.begin(), params.end());
        results.push_back(trace);
      }
      EXPECT_EQ(results[0], results[1]) << dtype << (tied ? " tied" : " untied");
    }
}

// A bad token id is refused on the host, before anything is uploaded, on any backend.
TEST(EmulatedBackend, BadTokenIdsAreRefusedBeforeUpload) {
  const RunConfig config = testing::tiny_run_config("fp32", true);
  auto be = make_emulated_backend();
  Trainer trainer(config, *be);
  trainer.initialise();
  data::Batch batch = testing::random_batch(4, 5, config.model.vocab_size, 1);
  batch.tokens[7] = 11;
  std::string m = error_of([&] { trainer.train_step(batch); });
  EXPECT_NE(m.find("token id 11 at position 7 is outside the model's vocabulary of 11"), std::string::npos) << m;
  batch = testing::random_batch(4, 5, config.model.vocab_size, 1);
  batch.targets[2] = 40;
  m = error_of([&] { trainer.train_step(batch); });
  EXPECT_NE(m.find("target id 40 at position 2"), std::string::npos) << m;
}

}  // namespace
}  // namespace tripod
