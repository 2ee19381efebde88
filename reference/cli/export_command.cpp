// tripod export hf --checkpoint DIR --out DIR [--dtype fp32|fp64]
#include <cstdio>

#include "backend/backend_factory.h"
#include "ckpt/checkpoint_root.h"
#include "cli/commands.h"
#include "export/hf_gpt2.h"

namespace tripod::cli {

void add_export_commands(CLI::App& app) {
  auto* exp = app.add_subcommand("export", "export a checkpoint to other frameworks' formats");
  exp->require_subcommand(1);
  auto* hf = exp->add_subcommand("hf", "Hugging Face GPT-2 layout: model.safetensors + config.json");
  struct Options {
    std::string checkpoint, out, dtype = "fp32";
  };
  auto opts = std::make_shared<Options>();
  hf->add_option("--checkpoint", opts->checkpoint, "Tripod checkpoint directory (tripod train --save)")->required();
  hf->add_option("--out", opts->out, "output directory")->required();
  hf->add_option("--dtype", opts->dtype, "fp32 or fp64")->capture_default_str();
  hf->callback([opts]() {
    auto backend = make_backend("cpu");  // a host job: the tensors are transposed and written from host memory
    // A root whose `latest` cannot be followed is exported from its newest complete step, as a
    // resume would: said, not silent, and the step read is named either way.
    if (const std::string problem = ckpt::latest_pointer_problem(opts->checkpoint); !problem.empty())
      std::fprintf(stderr, "tripod: warning: %s\n", problem.c_str());
    ExportReport r = export_hf_checkpoint(opts->checkpoint, opts->out, parse_dtype(opts->dtype), *backend);
    std::printf("wrote %s (%lld tensors, %lld parameters)%s from %s\n", r.model_file.string().c_str(),
                static_cast<long long>(r.tensors), static_cast<long long>(r.parameters),
                r.tokenizer_file.empty() ? " and config.json" : ", config.json and tokenizer.model",
                r.checkpoint_dir.string().c_str());
    if (r.tokenizer_lost)
      std::fprintf(stderr, "tripod: warning: no tokenizer.model written: %s\n", r.no_tokenizer.c_str());
    else if (r.tokenizer_file.empty())
      std::printf("no tokenizer.model: %s\n", r.no_tokenizer.c_str());
  });
}

}  // namespace tripod::cli
