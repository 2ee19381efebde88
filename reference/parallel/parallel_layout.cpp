#include "parallel/parallel_layout.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_split.h"
#include "parallel/tp_group.h"

namespace tripod {

std::string ParallelLayout::name() const {
  std::ostringstream out;
  out << "tp" << tp << "-pp" << pp << "-dp" << dp << "-z" << zero << "-mb" << micro_batches;
  if (sequence_parallel) out << "-sp";
  if (pipelined()) out << "-" << schedule_kind_name(schedule);
  if (virtual_stages > 1) out << "-v" << virtual_stages;
  if (recompute == Recompute::Selective) out << "-rsel";
  if (recompute == Recompute::Full) out << "-rfull";
  if (zero3_prefetch != 1) out << "-pf" << zero3_prefetch;
  if (fp32_param_gathers) out << "-gfp32";
  if (receives_ahead != 2) out << "-ra" << receives_ahead;
  if (vocab_multiple != 1) out << "-pad" << vocab_multiple;
  return out.str();
}

std::string ParallelLayout::describe() const {
  std::string text = tripod::describe(grid()) + ", ZeRO-" + std::to_string(zero);
  if (sequence_parallel) text += ", sequence parallel";
  if (pipelined())
    text += ", " + schedule_kind_name(schedule) + " m=" + std::to_string(micro_batches) +
            (virtual_stages > 1 ? " v=" + std::to_string(virtual_stages) : "");
  if (recompute != Recompute::None) text += ", " + recompute_name(recompute) + " recomputation";
  if (zero == 3 && zero3_prefetch != 1) text += ", prefetch " + std::to_string(zero3_prefetch);
  if (fp32_param_gathers) text += ", fp32 gathers";
  if (pipelined() && receives_ahead != 2) text += ", receives ahead " + std::to_string(receives_ahead);
  if (vocab_multiple != 1) text += ", vocabulary padded to a multiple of " + std::to_string(vocab_multiple) + " per TP rank";
  return text;
}

namespace {

// The setting a layout name's part sets (parts that set the same one exclude each other), or null
// for a part parse() does not know.
const char* setting_named_by(const std::string& part) {
  static const std::pair<const char*, const char*> prefixes[] = {
      {"pad", "vocabulary padding"}, {"tp", "TP size"}, {"pp", "PP size"}, {"dp", "DP size"},
      {"mb", "micro-batches"}, {"z", "ZeRO stage"}, {"pf", "ZeRO-3 prefetch"}, {"ra", "receives ahead"}};
  for (const auto& [prefix, setting] : prefixes)
    if (part.rfind(prefix, 0) == 0) return setting;
  if (part.rfind("v", 0) == 0 && part.size() > 1) return "virtual stages";
  if (part == "sp") return "sequence parallelism";
  if (part == "gfp32") return "fp32 gathers";
  if (part == "rsel" || part == "rfull") return "recomputation";
  if (part == "afab" || part == "1f1b" || part == "interleaved") return "pipeline schedule";
  return nullptr;
}

}  // namespace

ParallelLayout ParallelLayout::parse(const std::string& name) {
  ParallelLayout l;
  bool has_schedule = false;
  std::istringstream in(name);
  std::string part;
  std::map<std::string, std::string> seen;  // setting -> the part that set it
  while (std::getline(in, part, '-')) {
    auto number = [&](std::size_t prefix) {
      try {
        return std::stoi(part.substr(prefix));
      } catch (const std::exception&) {
        fail("layout '", name, "': cannot read a number in '", part, "'");
      }
    };
    if (const char* setting = setting_named_by(part)) {
      const auto [at, first] = seen.emplace(setting, part);  // a second part would silently win
      TRIPOD_CHECK(first, "layout '", name, "': '", part, "' sets the ", setting, " that '", at->second,
                   "' set already");
    }
    if (part.rfind("pad", 0) == 0) l.vocab_multiple = number(3);
    else if (part.rfind("tp", 0) == 0) l.tp = number(2);
    else if (part.rfind("pp", 0) == 0) l.pp = number(2);
    else if (part.rfind("dp", 0) == 0) l.dp = number(2);
    else if (part.rfind("mb", 0) == 0) l.micro_batches = number(2);
    else if (part.rfind("z", 0) == 0) l.zero = number(1);
    else if (part.rfind("pf", 0) == 0) l.zero3_prefetch = number(2);
    else if (part.rfind("ra", 0) == 0) l.receives_ahead = number(2);
    else if (part.rfind("v", 0) == 0 && part.size() > 1) l.virtual_stages = number(1);
    else if (part == "sp") l.sequence_parallel = true;
    else if (part == "gfp32") l.fp32_param_gathers = true;
    else if (part == "rsel") l.recompute = Recompute::Selective;
    else if (part == "rfull") l.recompute = Recompute::Full;
    else if (part == "afab" || part == "1f1b" || part == "interleaved") {
      l.schedule = parse_schedule_kind(part);
      has_schedule = true;
    } else {
      fail("layout '", name, "': unknown part '", part, "' (expected e.g. tp1-pp2-dp2-z1-mb4-1f1b, "
           "with -sp, -v2, -rsel, -rfull, -pf2, -gfp32, -ra0 or -pad64)");
    }
  }
  check(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.micro_batches >= 1, "layout '", name, "': sizes must be >= 1");
  check(l.pp > 1 || !has_schedule, "layout '", name, "': a pipeline schedule needs pp > 1");
  return l;
}

int64_t ParallelLayout::bucket_bytes_from_mib(double mib) {
  // Checked before the conversion: a NaN or out-of-range double cast to an integer is undefined.
  check(std::isfinite(mib) && mib > 0 && mib <= 1024.0 * 1024.0,
        "the gradient bucket size (--bucket-mb) must be a number of MiB in (0, 1048576] (got ", mib, ")");
  return std::max<int64_t>(1, static_cast<int64_t>(mib * 1024 * 1024));
}

void ParallelLayout::validate(const ModelConfig& model, const StepShape& step, int world_size) const {
  check_grid_layout(grid(), world_size, grid_order);
  validate(model, step);
}

void ParallelLayout::validate(const ModelConfig& model, const StepShape& step) const {
  check(zero >= 0 && zero <= 3, "the ZeRO stage (--zero) must be 0, 1, 2 or 3 (got ", zero, ")");
  check(bucket_bytes > 0, "the gradient bucket size (--bucket-mb) must be positive (got ", bucket_bytes, " bytes)");
  check(zero3_prefetch >= 0 && zero3_prefetch <= 64, "the ZeRO-3 prefetch (--zero3-prefetch) must be 0-64 buckets (got ",
        zero3_prefetch, ")");
  check(!fp32_param_gathers || zero >= 1, "fp32 parameter gathers (-gfp32, --gather-fp32) are for ZeRO 1-3, whose "
        "parameters are gathered; ZeRO-0 gathers none");
  check(receives_ahead >= 0 && receives_ahead <= 1024, "pipeline receives posted ahead (--receives-ahead) must be "
        "0-1024 (got ", receives_ahead, ")");
  check(vocab_multiple >= 1 && vocab_multiple <= 65536, "the vocabulary padding multiple "
        "(--make-vocab-size-divisible-by) must be 1-65536 (got ", vocab_multiple, ")");
  check(tp >= 1 && pp >= 1 && dp >= 1, "layout ", name(), ": every dimension must be at least 1");
  tp::validate_tensor_parallel(model, tp);  // heads and d_ff divisible, tp <= heads
  check(!sequence_parallel || tp > 1, "sequence parallelism (--sequence-parallel) needs tensor parallelism (tp > 1)");
  check(virtual_stages == 1 || pp > 1, "virtual stages (--virtual-stages ", virtual_stages,
        ") need pipeline parallelism (pp > 1)");
  check(micro_batches >= 1 && micro_batches <= 1 << 20, "train.micro_batches must be in [1, 2^20] (got ", micro_batches,
        ")");
  check(step.batch_size % dp == 0, "train.batch_size (", step.batch_size, ") does not divide among ", dp,
        " data-parallel ranks");
  check(local_batch(step) % micro_batches == 0, "train.batch_size ", step.batch_size, " over dp=", dp, " gives ",
        local_batch(step), " sequences per rank, which do not split into ", micro_batches,
        " micro-batches (--microbatches)");
  // Enough layers for the chunks, a split that adds up, a schedule the micro-batches allow, tags.
  const PipelineSplit split(model.n_layer, pp, virtual_stages, step.pipeline_split);
  check_message_tags(make_schedule(schedule, pp, micro_batches, virtual_stages));
  if (sequence_parallel) tp::sequence_shard_rows(micro_batch(step) * step.seq_len, tp);  // the tokens split evenly
}

std::vector<ParallelLayout> enumerate_layouts(int world_size, const ModelConfig& model, const StepShape& step) {
  const int64_t batch_size = step.batch_size, n_layer = model.n_layer;
  std::vector<ParallelLayout> layouts;
  for (int tp = 1; tp <= world_size; ++tp) {
    if (world_size % tp != 0 || model.n_head % tp != 0 || model.d_ff % tp != 0) continue;
    for (int pp = 1; tp * pp <= world_size && pp <= n_layer; ++pp) {
      if (world_size % (tp * pp) != 0) continue;
      for (int dp = 1; tp * pp * dp <= world_size; ++dp) {
        if (world_size % (tp * pp * dp) != 0 || batch_size % dp != 0) continue;
        // Pipelines get their own micro-batch counts (m = p and 2p fill them) and every schedule.
        const std::vector<int> micros = pp == 1 ? std::vector<int>{1, 2} : std::vector<int>{pp, 2 * pp};
        std::vector<std::pair<ScheduleKind, int>> schedules{{ScheduleKind::OneFOneB, 1}};
        if (pp > 1)
          schedules = {{ScheduleKind::AllForwardAllBackward, 1}, {ScheduleKind::OneFOneB, 1},
                       {ScheduleKind::Interleaved, 2}};
        for (int zero = 0; zero <= 3; ++zero)
          for (int micro : micros)
            for (const auto& [schedule, v] : schedules)
              for (bool sp : {false, true}) {
                const int64_t tokens = batch_size / dp / micro * step.seq_len;  // of one micro-batch
                if ((batch_size / dp) % micro != 0 || (sp && (tp == 1 || tokens % tp != 0))) continue;
                if (pp * v > n_layer || (schedule == ScheduleKind::Interleaved && micro % pp != 0)) continue;
                ParallelLayout l;
                l.tp = tp, l.pp = pp, l.dp = dp, l.zero = zero, l.micro_batches = micro;
                l.schedule = schedule, l.virtual_stages = v, l.sequence_parallel = sp;
                layouts.push_back(l);
                // A padded vocabulary as a dimension: each ZeRO-2 layout (a tied head, so the tied
                // gradient's split and the pipeline's tied copy) of the first micro-batch count,
                // without SP, again with 16 rows per TP rank (97 -> 112, 2 x 64 or 4 x 32 rows:
                // TP rank 3 of 4 holds one real row).
                if (zero == 2 && micro == micros.front() && !sp) {
                  ParallelLayout padded = l;
                  padded.vocab_multiple = 16;
                  layouts.push_back(padded);
                }
                // Recomputation as a dimension, on the stages where it meets the most: full with
                // ZeRO-3 (parameters gathered again for the rerun forward, two buckets ahead),
                // selective with ZeRO-1.
                if (zero == 1 || zero == 3) {
                  l.recompute = zero == 3 ? Recompute::Full : Recompute::Selective;
                  l.zero3_prefetch = zero == 3 ? 2 : 1;
                  layouts.push_back(l);
                }
              }
      }
    }
  }
  return layouts;
}

}  // namespace tripod
