#include "parallel/parallel_layout.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>

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
  if (overlap_param_gather) out << "-opg";
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
  if (overlap_param_gather) text += ", parameter gathers overlapped with the next forward";
  if (pipelined() && receives_ahead != 2) text += ", receives ahead " + std::to_string(receives_ahead);
  if (vocab_multiple != 1) text += ", vocabulary padded to a multiple of " + std::to_string(vocab_multiple) + " per TP rank";
  return text;
}

namespace {

// One kind of part in a layout name: a numbered part is its prefix and a count (tp2, z1, pad64),
// a flag is its whole name (sp, rsel, 1f1b). Parts that set the same setting exclude each other.
struct LayoutPart {
  const char* text;
  bool numbered;
  const char* setting;
  void (*apply)(ParallelLayout& layout, const std::string& part, int number);
};

const LayoutPart kLayoutParts[] = {
    {"pad", true, "vocabulary padding", [](ParallelLayout& l, const std::string&, int n) { l.vocab_multiple = n; }},
    {"tp", true, "TP size", [](ParallelLayout& l, const std::string&, int n) { l.tp = n; }},
    {"pp", true, "PP size", [](ParallelLayout& l, const std::string&, int n) { l.pp = n; }},
    {"dp", true, "DP size", [](ParallelLayout& l, const std::string&, int n) { l.dp = n; }},
    {"mb", true, "micro-batches", [](ParallelLayout& l, const std::string&, int n) { l.micro_batches = n; }},
    {"z", true, "ZeRO stage", [](ParallelLayout& l, const std::string&, int n) { l.zero = n; }},
    {"pf", true, "ZeRO-3 prefetch", [](ParallelLayout& l, const std::string&, int n) { l.zero3_prefetch = n; }},
    {"ra", true, "receives ahead", [](ParallelLayout& l, const std::string&, int n) { l.receives_ahead = n; }},
    {"v", true, "virtual stages", [](ParallelLayout& l, const std::string&, int n) { l.virtual_stages = n; }},
    {"sp", false, "sequence parallelism",
     [](ParallelLayout& l, const std::string&, int) { l.sequence_parallel = true; }},
    {"gfp32", false, "fp32 gathers", [](ParallelLayout& l, const std::string&, int) { l.fp32_param_gathers = true; }},
    {"opg", false, "overlapped parameter gathers",
     [](ParallelLayout& l, const std::string&, int) { l.overlap_param_gather = true; }},
    {"rsel", false, "recomputation",
     [](ParallelLayout& l, const std::string&, int) { l.recompute = Recompute::Selective; }},
    {"rfull", false, "recomputation",
     [](ParallelLayout& l, const std::string&, int) { l.recompute = Recompute::Full; }},
    {"afab", false, "pipeline schedule",
     [](ParallelLayout& l, const std::string& p, int) { l.schedule = parse_schedule_kind(p); }},
    {"1f1b", false, "pipeline schedule",
     [](ParallelLayout& l, const std::string& p, int) { l.schedule = parse_schedule_kind(p); }},
    {"interleaved", false, "pipeline schedule",
     [](ParallelLayout& l, const std::string& p, int) { l.schedule = parse_schedule_kind(p); }},
};

// The kind of `part`, or null for a part parse() does not know (a bare prefix such as "v" too).
const LayoutPart* layout_part_named(const std::string& part) {
  for (const LayoutPart& kind : kLayoutParts) {
    const std::size_t length = std::char_traits<char>::length(kind.text);
    const bool numbered_match = part.size() > length && part.compare(0, length, kind.text) == 0;
    if (kind.numbered ? numbered_match : part == kind.text) return &kind;
  }
  return nullptr;
}

// The count after a numbered part's prefix: digits only (std::stoi read "tp2x" as 2 and "z+1" as 1).
int part_number(const std::string& name, const std::string& part, std::size_t prefix) {
  const std::string digits = part.substr(prefix);
  const bool all_digits = !digits.empty() && digits.size() <= 9 &&
                          std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!all_digits) fail("layout '", name, "': cannot read a number in '", part, "'");
  return std::stoi(digits);
}

}  // namespace

ParallelLayout ParallelLayout::parse(const std::string& name) {
  ParallelLayout l;
  std::istringstream in(name);
  std::string part;
  std::map<std::string, std::string> seen;  // setting -> the part that set it
  while (std::getline(in, part, '-')) {
    const LayoutPart* kind = layout_part_named(part);
    if (kind == nullptr)
      fail("layout '", name, "': unknown part '", part, "' (expected e.g. tp1-pp2-dp2-z1-mb4-1f1b, "
           "with -sp, -v2, -rsel, -rfull, -pf2, -gfp32, -opg, -ra0 or -pad64)");
    const int number = kind->numbered ? part_number(name, part, std::char_traits<char>::length(kind->text)) : 0;
    const auto [at, first] = seen.emplace(kind->setting, part);  // a second part would silently win
    TRIPOD_CHECK(first, "layout '", name, "': '", part, "' sets the ", kind->setting, " that '", at->second,
                 "' set already");
    kind->apply(l, part, number);
  }
  check(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.micro_batches >= 1, "layout '", name, "': sizes must be >= 1");
  check(l.pp > 1 || seen.count("pipeline schedule") == 0, "layout '", name, "': a pipeline schedule needs pp > 1");
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
  check(!overlap_param_gather || zero == 1 || zero == 2, "overlapped parameter gathers (-opg, --overlap-param-gather) "
        "are for ZeRO-1/2, whose updated parameters are all-gathered after the step (ZeRO-", zero, ": ",
        zero == 3 ? "gathers on use; -pfN prefetches" : "gathers none", ")");
  check(receives_ahead >= 0 && receives_ahead <= 1024, "pipeline receives posted ahead (--receives-ahead) must be "
        "0-1024 (got ", receives_ahead, ")");
  check(vocab_multiple >= 1 && vocab_multiple <= 65536, "the vocabulary padding multiple "
        "(--make-vocab-size-divisible-by) must be 1-65536 (got ", vocab_multiple, ")");
  check(tp >= 1 && pp >= 1 && dp >= 1, "layout ", name(), ": every dimension must be at least 1");
  tp::validate_tensor_parallel(model, tp);  // heads and d_ff divisible, tp <= heads
  check(!sequence_parallel || tp > 1, "sequence parallelism (--sequence-parallel) needs tensor parallelism (tp > 1)");
  check(virtual_stages >= 1, "virtual stages (--virtual-stages) must be >= 1 (got ", virtual_stages, ")");
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
                // A padded vocabulary as a dimension: each ZeRO-2 layout of the first micro-batch
                // count, without SP, again with 16 rows per TP rank (97 -> 112, 2 x 64 or 4 x 32
                // rows: TP rank 3 of 4 holds one real row); with the tied head (conform alternates
                // them) it meets the tied gradient's split and the pipeline's tied copy.
                if (zero == 2 && micro == micros.front() && !sp) {
                  ParallelLayout padded = l;
                  padded.vocab_multiple = 16;
                  layouts.push_back(padded);
                }
                // The after-step gathers overlapped with the next forward: each ZeRO-2 layout over
                // more than one DP rank of the last micro-batch count, without SP, again with -opg
                // (ZeRO-3 is its bit twin, so any difference the overlap makes shows).
                if (zero == 2 && dp > 1 && micro == micros.back() && !sp) {
                  ParallelLayout overlapped = l;
                  overlapped.overlap_param_gather = true;
                  layouts.push_back(overlapped);
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
