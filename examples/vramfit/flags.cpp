// The flags: CLI11's apps and options, the model and step flags. The only file besides cli.cpp that
// includes CLI11 (header-only, and the costliest part of the build: its ~10 s at -O3 are paid once per
// unity batch that includes it, so the subcommands declare their flags through common.hpp).

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common.hpp"

namespace vramfit::cli {

namespace {
/// --budget's value: a size with a unit, more than 0 bytes.
Bytes parse_budget(std::string_view v) {
  const Bytes b = parse_size(v, "--budget");
  if (b.count() == 0) throw InvalidInput("--budget", "must be more than 0 bytes, got '" + std::string(v) + "'");
  return b;
}
}  // namespace

CLI::App* add_command(CLI::App& parent, const std::string& name, const std::string& usage,
                      const std::string& summary, const std::string& exit_status) {
  CLI::App* app = parent.add_subcommand(name, summary);
  app->allow_extras();
  parent.get_formatter()->label("usage " + name, usage);  // the subcommands share the parent's formatter
  app->footer("exit status: " + exit_status);
  return app;
}

CLI::Option* add_value(CLI::App& app, BadValues& bad, const std::string& flag, const std::string& value,
                       const std::string& help, std::function<void(std::string_view)> read) {
  const auto take = [&bad, flag, value, read = std::move(read)](const std::string& text) {
    // CLI11 takes the next argument as the value even when it is a flag: `--seq --help` is the
    // help, as --help is anywhere else; `--seq --model X` is a missing value.
    if (text == "--help" || text == "-h") throw CLI::CallForHelp();
    try {
      if (text.empty() || text.starts_with("--")) throw InvalidInput(flag, "missing value (expected " + value + ")");
      read(text);
    } catch (const InvalidInput& e) {
      bad.keep(e);
    }
  };
  return app.add_option_function<std::string>(flag, take, help)->type_name(value);
}

CLI::Option* add_switch(CLI::App& app, const std::string& flag, bool& on, const std::string& help) {
  return app.add_flag(flag, on, help)->disable_flag_override()->multi_option_policy(CLI::MultiOptionPolicy::Throw);
}

CLI::Option* add_stack(CLI::App& app, BadValues& bad, Stack& stack) {
  return add_value(app, bad, "--stack", "hf-peft|hf-trainer|libtorch",
                   "hf-peft: HF transformers + PEFT + torch AdamW in a plain loop; hf-trainer: transformers.Trainer "
                   "(autocast, its optimizers, accumulation, fp32 weights; the closed form, simulated where a program of its "
                   "step applies); libtorch: the probe's lean "
                   "C++ step (default hf-peft)",
                   [&stack](std::string_view v) { stack = parse_stack(v, "--stack"); });
}

bool given(const CLI::Option* option) { return option != nullptr && option->count() > 0; }

std::string command_name(const CLI::App& app) { return app.get_name(); }

namespace {

/// The canonical name of a built-in model, matched case-insensitively.
std::string canonical_preset_name(std::string_view name) {
  (void)preset(name, "--model");  // throws, listing the built-in models
  for (const auto& p : presets)
    if (vramfit::detail::iequals(p.name, name)) return std::string(p.name);
  return std::string(name);
}

}  // namespace

void ModelFlags::add(CLI::App& app, BadValues& bad, StepFlagSet set) {
  add_value(app, bad, "--model", "NAME",
            "a built-in model (see `vramfit presets`), e.g. Qwen2.5-0.5B; or give --config",
            [this](std::string_view v) { model = canonical_preset_name(v); });
  add_value(app, bad, "--config", "PATH",
            "a Hugging Face config.json (model_type llama, qwen2, qwen3 or mistral); or give --model",
            [this](std::string_view v) { config = std::filesystem::path(v); });
  const std::string list = set.lists ? ", one value or a comma-separated list" : "";
  const std::string numbers = set.lists ? "N[,N...]" : "N";
  if (set.batch)
    add_value(app, bad, "--batch", numbers, "sequences per step, 1 to 1048576" + list + " (default 1)",
              [this, set](std::string_view v) {
                batches = parse_numbers("--batch", v, set.lists);
                step.batch = batches.front();
              });
  if (set.seq)
    add_value(app, bad, "--seq", numbers, "tokens per sequence, 1 to 16777216" + list + " (default 2048)",
              [this, set](std::string_view v) {
                seqs = parse_numbers("--seq", v, set.lists);
                step.seq = seqs.front();
              });
  add_value(app, bad, "--mode", "lora|full", "LoRA adapters or full fine-tuning (default lora)",
            [this](std::string_view v) { step.mode = parse_mode(v, "--mode"); });
  lora_rank_ = add_value(app, bad, "--lora-rank", "R", "LoRA rank, 1 to 65536 (default 8); needs --mode lora",
                         [this](std::string_view v) { step.lora.rank = parse_positive("--lora-rank", v); });
  lora_targets_ = add_value(
      app, bad, "--lora-targets", "LIST",
      "projections with adapters: comma-separated from q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
      "down_proj, or all-linear (default q_proj,v_proj, PEFT's default); needs --mode lora",
      [this](std::string_view v) { step.lora.targets = parse_targets(v, "--lora-targets"); });
  lora_dropout_ = add_value(
      app, bad, "--lora-dropout", "P",
      "LoRA dropout, 0 to below 1 (default 0: PEFT's identity); above 0 each adapter keeps a dropped copy of its "
      "input and a mask; needs --mode lora",
      [this](std::string_view v) { step.lora.dropout = parse_probability("--lora-dropout", v); });
  add_value(app, bad, "--optim", "adamw|adamw-fused|adafactor|sgd-momentum|sgd",
            "the optimizer: AdamW (torch.optim.AdamW, foreach; hf-peft's default), fused AdamW (hf-trainer's "
            "default), Adafactor (transformers', as the Trainer builds it), SGD with momentum (one buffer per "
            "trainable parameter) or plain SGD (no state); the Trainer's names adamw_torch_fused and adamw_torch "
            "are read too",
            [this](std::string_view v) {
              step.optimizer = parse_optimizer(v, "--optim");
              optim_given_ = true;
            });
  add_value(app, bad, "--grad-accum", "N",
            "micro-batches per optimizer step, 1 to 65536 (the Trainer's gradient_accumulation_steps; default 1); "
            "needs --stack hf-trainer",
            [this](std::string_view v) {
              step.grad_accum = parse_positive("--grad-accum", v);
              vramfit::detail::require_range("--grad-accum", step.grad_accum, 1, 65536);
              grad_accum_given_ = true;
            });
  add_value(app, bad, "--weights", "bf16|fp16|fp32",
            "dtype the weights are loaded in (default: the config's, else --precision's); under --precision bf16 "
            "or fp16 (the autocast) fp32 weights are mixed precision; without --precision the step runs in this "
            "dtype, unmixed; needs --stack hf-trainer",
            [this](std::string_view v) {
              step.weights = parse_precision(v, "--weights");
              weights_given_ = true;
            });
  add_switch(app, "--grad-ckpt", step.gradient_checkpointing,
             "gradient checkpointing (non-reentrant): keep each layer's input only (default off)");
  add_switch(app, "--logits-retained", step.logits_retained,
             "the training loop keeps the model output (and its logits) through backward (default off)");
  add_value(app, bad, "--attention", "flash|mem-efficient|math",
            "the attention kernel; math builds the (seq x seq) score matrix (default flash)",
            [this](std::string_view v) { step.attention = parse_attention(v, "--attention"); });
  add_stack(app, bad, stack);
  add_value(app, bad, "--phase", "first|steady",
            "the peak of the first step only (no optimizer state yet) or of every step (default steady)",
            [this](std::string_view v) { step.peak_over = parse_peak_over(v, "--phase"); });
  add_value(app, bad, "--precision", "bf16|fp16|fp32",
            "dtype of the weights and activations (default: the config's dtype, else bf16); with --stack "
            "hf-trainer the autocast dtype (the Trainer's bf16 or fp16; fp32: no autocast)",
            [this](std::string_view v) {
              step.precision = parse_precision(v, "--precision");
              precision_given_ = true;
            });
  budget_ = add_value(app, bad, "--budget", "SIZE",
            "memory the caching allocator may reserve, e.g. 24GiB, 23.0 GB, 80e9B (a unit is required: B, kB, MB, GB, "
            "TB, KiB, MiB, GiB, TiB; k, M, G, T); a run fits when the simulated build and three steps run under it "
            "without running out of memory (the peak plus the allocator's margin where no program applies); "
            "max-batch and max-seq need it or --gpu",
            [this](std::string_view v) { budget = parse_budget(v); });
  if (set.fit) {
    std::string cards;
    for (const Gpu& g : gpus) cards += (cards.empty() ? "" : ", ") + std::string(g.name);
    gpu_ = add_value(app, bad, "--gpu", "NAME",
                     "a card whose memory is the budget (its total less the CUDA context's share): " + cards +
                         "; instead of --budget",
                     [this](std::string_view v) { budget = gpu(v, "--gpu").allocator_budget(); });
    add_value(app, bad, "--alloc-conf", "TEXT",
              "the allocator's settings in PYTORCH_CUDA_ALLOC_CONF's syntax, e.g. expandable_segments:True or "
              "max_split_size_mb:512 (also garbage_collection_threshold:X); other keys are refused",
              [this](std::string_view v) { alloc_conf = parse_alloc_conf(v, "--alloc-conf"); });
    add_value(app, bad, "--programs", "FILE|DIR",
              "step programs to simulate with instead of the built-in ones: a file that vramfit-record or "
              "trace_program.py wrote, or a directory holding STACK.programs (e.g. hf-peft.programs); a file "
              "of another stack than --stack is not used (a warning says so)",
              [this](std::string_view v) { programs_path = std::filesystem::path(v); });
  }
  if (!set.ranks) return;
  add_value(app, bad, "--world-size", "N",
            "data-parallel ranks, 1 to 65536 (default 1); --batch is then each rank's micro-batch and every figure "
            "is per rank",
            [this](std::string_view v) { step.world_size = parse_positive("--world-size", v); });
  add_value(app, bad, "--sharding", "none|zero1|zero2|full|hybrid:K",
            "how the ranks share the state (default none: DDP when --world-size is above 1): zero1 partitions "
            "AdamW's moments, zero2 also the grads (ZeRO stages 1 and 2, with DeepSpeed's buffers but the stack's "
            "dtypes: DeepSpeed's fp32 master weights are not counted), full also the weights (FSDP2 fully_shard), "
            "hybrid:K shards within groups of K ranks (K divides --world-size) and replicates across them",
            [this](std::string_view v) {
              const ShardingChoice c = parse_sharding(v, "--sharding");
              step.sharding = c.sharding;
              step.shard_group = c.shard_group;
            });
}

void ModelFlags::check(bool model_required) const {
  if (model && config) throw InvalidInput("--config", "give either --model or --config, not both");
  if (gpu_ != nullptr && gpu_->count() > 0 && budget_->count() > 0)
    throw InvalidInput("--gpu", "give either --budget or --gpu, not both (--gpu NAME stands for its card's budget)");
  if (!model && !config && model_required)
    throw InvalidInput("--model", "a model is required: --model NAME (a built-in model, see `vramfit presets`) or "
                                  "--config PATH (a Hugging Face config.json)");
  if (step.mode == Mode::full) {
    if (lora_rank_->count() > 0)
      throw InvalidInput("--lora-rank", "needs --mode lora (full fine-tuning has no adapters)");
    if (lora_targets_->count() > 0)
      throw InvalidInput("--lora-targets", "needs --mode lora (full fine-tuning has no adapters)");
    if (lora_dropout_->count() > 0)
      throw InvalidInput("--lora-dropout", "needs --mode lora (full fine-tuning has no adapters)");
  }
  if (stack == Stack::hf_trainer && step.world_size > 1)
    throw InvalidInput("--world-size", "the hf-trainer stack is modelled on one GPU; for several ranks give "
                                       "--stack hf-peft (the plain loop's per-rank model)");
  if (stack == Stack::hf_trainer && step.sharding != Sharding::none)
    throw InvalidInput("--sharding", "the hf-trainer stack is modelled on one GPU, unsharded; for sharding give "
                                     "--stack hf-peft");
  if (stack != Stack::hf_trainer) {
    if (grad_accum_given_)
      throw InvalidInput("--grad-accum", "gradient accumulation is modelled for the Trainer's step: needs --stack "
                                         "hf-trainer");
    if (weights_given_)
      throw InvalidInput("--weights", "needs --stack hf-trainer (on " + std::string(to_string(stack)) +
                                          " --precision is the weights' dtype)");
  } else if (precision_given_ && step.weights && *step.weights != step.precision &&
             !(*step.weights == Precision::fp32 && step.precision != Precision::fp32)) {
    throw InvalidInput("--weights", "with --precision " + std::string(to_string(step.precision)) +
                                        " the weights are " + std::string(to_string(step.precision)) +
                                        ", or fp32 under bf16 or fp16 autocast (mixed precision)");
  }
  if (stack == Stack::libtorch) {
    if (step.lora_dropout())
      throw InvalidInput("--lora-dropout", "the libtorch stack's step (the Probe's reference step) runs no dropout");
    if (step.optimizer != Optimizer::adamw)
      throw InvalidInput("--optim", "the libtorch stack's step (the Probe's reference step) runs torch::optim::AdamW only");
  }
}

}  // namespace vramfit::cli
