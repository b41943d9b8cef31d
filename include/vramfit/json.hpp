#pragma once
/// @file json.hpp
/// vramfit's one JSON schema, as nlohmann `to_json`/`from_json`: every writer (the CLI, the Probe)
/// and reader (measurement rows, traces) goes through these. Needs nlohmann-json (`vramfit::json`).
///
///     nlohmann::json j = step;                     // {"batch": 4, "seq": 2048, ...}
///     const vramfit::Step back = j.get<vramfit::Step>();
///
/// Schema (keys; every count a non-negative integer):
/// - ModelShape: vocab, hidden, intermediate, layers, heads, kv_heads, head_dim (0 or absent:
///   hidden / heads), tied_embeddings, qkv_bias, gated_mlp, qk_norm (booleans, absent: false, false,
///   true, false).
/// - Step: batch, seq, precision, mode, lora_rank and lora_targets (an array of projection names;
///   only in LoRA mode; lora_dropout), gradient_checkpointing, attention, logits_retained, optim,
///   grad_accum, weights (the weights' dtype; hf-trainer's mixed precision where it is not the precision), peak_over
///   ("first"/"steady"), world_size, sharding ("none", ..., "hybrid:K"). Absent (or null) keys take
///   `Step{}`'s values, except batch and seq, which are required.
/// - PhaseBytes: {phase key: bytes} for the five phases.
/// - Estimate (written only): peak_bytes, required_bytes, method, phase, stack, provenance
///   {basis (the CLI's line), method, recorded_gpu, recorded_software, unvalidated (null on one GPU)}, closed_form
///   {peak_bytes, required_bytes, phase, phases, terms [{name, bytes, phases}]}, simulation
///   ({available, ...figures} or {available: false, why}).
/// A bad value throws `InvalidInput` naming the key. The writers take any nlohmann JSON type, so
/// `nlohmann::ordered_json` keeps the keys in the order above; the readers take `nlohmann::json`.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vramfit/bytes.hpp"
#include "vramfit/detail/json_describe.hpp"
#include "vramfit/error.hpp"
#include "vramfit/estimate.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"

namespace vramfit {

namespace detail {
/// Whether `key` is there and not null (an optional key that is null reads as absent).
inline bool json_has(const nlohmann::json& j, std::string_view key) {
  const auto it = j.find(key);
  return it != j.end() && !it->is_null();
}
inline const nlohmann::json& json_field(const nlohmann::json& j, std::string_view key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) throw InvalidInput(key, "is required");
  return *it;
}
inline std::uint64_t json_count(const nlohmann::json& j, std::string_view key) {
  const nlohmann::json& v = json_field(j, key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    throw InvalidInput(key, "must be a non-negative integer, got " + describe_json(v));
  return v.get<std::uint64_t>();
}
inline bool json_bool(const nlohmann::json& j, std::string_view key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InvalidInput(key, "must be true or false, got " + describe_json(*it));
  return it->get<bool>();
}
inline std::string json_string(const nlohmann::json& j, std::string_view key) {
  const nlohmann::json& v = json_field(j, key);
  if (!v.is_string()) throw InvalidInput(key, "must be a string, got " + describe_json(v));
  return v.get<std::string>();
}
}  // namespace detail

template <class Json>
void to_json(Json& j, const ModelShape& m) {
  j = {{"vocab", m.vocab},       {"hidden", m.hidden},
       {"intermediate", m.intermediate}, {"layers", m.layers},
       {"heads", m.heads},       {"kv_heads", m.kv_heads},
       {"head_dim", m.head_dimension()}, {"tied_embeddings", m.tied_embeddings},
       {"qkv_bias", m.qkv_bias}, {"gated_mlp", m.gated_mlp}, {"qk_norm", m.qk_norm}};
}

/// Reads and validates a shape.
inline void from_json(const nlohmann::json& j, ModelShape& m) {
  if (!j.is_object()) throw InvalidInput("shape", "must be a JSON object");
  m = ModelShape{};
  m.vocab = detail::json_count(j, "vocab");
  m.hidden = detail::json_count(j, "hidden");
  m.intermediate = detail::json_count(j, "intermediate");
  m.layers = detail::json_count(j, "layers");
  m.heads = detail::json_count(j, "heads");
  m.kv_heads = detail::json_count(j, "kv_heads");
  if (detail::json_has(j, "head_dim")) m.head_dim = detail::json_count(j, "head_dim");
  m.tied_embeddings = detail::json_bool(j, "tied_embeddings", false);
  m.qkv_bias = detail::json_bool(j, "qkv_bias", false);
  m.qk_norm = detail::json_bool(j, "qk_norm", false);
  m.gated_mlp = detail::json_bool(j, "gated_mlp", true);
  validate(m);
}

template <class Json>
void to_json(Json& j, const Step& s) {
  j = Json::object();
  j["batch"] = s.batch;
  j["seq"] = s.seq;
  j["precision"] = to_string(s.precision);
  j["mode"] = to_string(s.mode);
  if (s.mode == Mode::lora) {
    Json targets = Json::array();
    for (Module m : all_modules)
      if (s.lora.targets.has(m)) targets.push_back(to_string(m));
    j["lora_rank"] = s.lora.rank;
    j["lora_targets"] = std::move(targets);
    j["lora_dropout"] = s.lora.dropout;
  }
  j["gradient_checkpointing"] = s.gradient_checkpointing;
  j["attention"] = to_string(s.attention);
  j["logits_retained"] = s.logits_retained;
  j["optim"] = to_string(s.optimizer);
  j["grad_accum"] = s.grad_accum;
  j["weights"] = to_string(s.weight_precision());
  j["peak_over"] = to_string(s.peak_over);
  j["world_size"] = s.world_size;
  j["sharding"] = sharding_name(s);
}

/// Reads a step (not validated against a model: `validate(step, model)` does that).
inline void from_json(const nlohmann::json& j, Step& s) {
  if (!j.is_object()) throw InvalidInput("step", "must be a JSON object");
  s = Step{};
  s.batch = detail::json_count(j, "batch");
  s.seq = detail::json_count(j, "seq");
  if (detail::json_has(j, "precision")) s.precision = parse_precision(detail::json_string(j, "precision"), "precision");
  if (detail::json_has(j, "mode")) s.mode = parse_mode(detail::json_string(j, "mode"), "mode");
  if (s.mode == Mode::lora) {
    s.lora.rank = detail::json_count(j, "lora_rank");
    const nlohmann::json& targets = detail::json_field(j, "lora_targets");
    if (!targets.is_array()) throw InvalidInput("lora_targets", "must be an array of projection names");
    std::string names;
    for (const nlohmann::json& t : targets) {
      if (!t.is_string()) throw InvalidInput("lora_targets", "must be an array of projection names");
      if (!names.empty()) names += ',';
      names += t.get<std::string>();
    }
    s.lora.targets = parse_targets(names, "lora_targets");
    if (const auto d = j.find("lora_dropout"); d != j.end() && !d->is_null()) {
      if (!d->is_number()) throw InvalidInput("lora_dropout", "must be a number in [0, 1)");
      s.lora.dropout = d->get<double>();
      if (!(s.lora.dropout >= 0 && s.lora.dropout < 1)) throw InvalidInput("lora_dropout", "must be a number in [0, 1)");
    }
  }
  s.gradient_checkpointing = detail::json_bool(j, "gradient_checkpointing", false);
  if (detail::json_has(j, "attention")) s.attention = parse_attention(detail::json_string(j, "attention"), "attention");
  s.logits_retained = detail::json_bool(j, "logits_retained", false);
  // Rows written before "optim" existed ran AdamW (the harness's top-level "optimizer" is its
  // settings object, not this).
  if (detail::json_has(j, "optim")) s.optimizer = parse_optimizer(detail::json_string(j, "optim"), "optim");
  if (detail::json_has(j, "grad_accum")) s.grad_accum = detail::json_count(j, "grad_accum");
  // The weights' dtype; rows from before it existed, and rows naming the precision, are unmixed.
  if (detail::json_has(j, "weights")) {
    const Precision w = parse_precision(detail::json_string(j, "weights"), "weights");
    if (w != s.precision) s.weights = w;
  }
  if (detail::json_has(j, "peak_over")) s.peak_over = parse_peak_over(detail::json_string(j, "peak_over"), "peak_over");
  if (detail::json_has(j, "world_size")) s.world_size = detail::json_count(j, "world_size");
  if (detail::json_has(j, "sharding")) {
    const ShardingChoice c = parse_sharding(detail::json_string(j, "sharding"), "sharding");
    s.sharding = c.sharding;
    s.shard_group = c.shard_group;
  }
}

template <class Json>
void to_json(Json& j, const PhaseBytes& bytes) {
  j = Json::object();
  for (Phase p : all_phases) j[std::string(to_key(p))] = bytes[p].count();
}

inline void from_json(const nlohmann::json& j, PhaseBytes& bytes) {
  if (!j.is_object()) throw InvalidInput("phases", "must be a JSON object");
  for (Phase p : all_phases) bytes[p] = Bytes(detail::json_count(j, to_key(p)));
}

/// The closed form: peak, required, the phase of the peak, every phase's total and every term's.
template <class Json>
void to_json(Json& j, const Prediction& p) {
  Json terms = Json::array();
  for (std::size_t k = 0; k < p.term_count; ++k)
    terms.push_back({{"name", p.terms[k].name}, {"bytes", p.term_at_peak(k).count()}, {"phases", p.terms[k].bytes}});
  j = {{"peak_bytes", p.peak.count()},
       {"required_bytes", p.required.count()},
       {"phase", to_key(p.phase)},
       {"phases", p.phases},
       {"terms", std::move(terms)}};
}

template <class Json>
void to_json(Json& j, const Simulation& s) {
  j = {{"peak_bytes", s.peak.count()},         {"first_step_bytes", s.first.count()},
       {"steady_bytes", s.steady.count()},     {"after_build_bytes", s.after_build.count()},
       {"reserved_bytes", s.reserved.count()}, {"phase", s.phase},
       {"requests", s.requests}};
}

/// How the estimate was obtained and how far it is checked: `basis(e)`, the line the CLI prints, and
/// its parts.
template <class Json>
Json provenance_json(const Estimate& e) {
  Json j = {{"basis", basis(e)},
            {"method", to_string(e.method)},
            {"recorded_gpu", e.provenance.gpu},
            {"recorded_software", e.provenance.software}};
  j["unvalidated"] = e.provenance.unvalidated.empty() ? Json(nullptr) : Json(e.provenance.unvalidated);
  j["programs"] = e.provenance.programs.empty() ? Json(nullptr) : Json(e.provenance.programs);
  return j;
}

/// The decision under a budget: fits, how, whether a fresh process fits (simulation), the simulated
/// reserved peak, and an OOM's figures.
template <class Json>
void to_json(Json& j, const BudgetVerdict& v) {
  j = {{"budget_bytes", v.budget.count()}, {"fits", v.fits}, {"method", to_string(v.method)}};
  if (v.method == Method::allocator_simulation) {
    j["fits_fresh_process"] = v.fits_fresh_process;
    j["reserved_peak_bytes"] = v.reserved_peak.count();
    j["reserved_peak_fresh_process_bytes"] = v.reserved_peak_fresh_process.count();
  }
  if (v.oom)
    j["oom"] = {{"step", v.oom->step},
                {"phase", v.oom->phase},
                {"requested_bytes", v.oom->requested.count()},
                {"tried_to_allocate_bytes", v.oom->tried_to_allocate.count()},
                {"allocated_bytes", v.oom->allocated.count()},
                {"reserved_unallocated_bytes", v.oom->reserved_unallocated.count()},
                {"limit_bytes", v.oom->limit.count()}};
}

template <class Json>
void to_json(Json& j, const Estimate& e) {
  Json simulation = e.simulation ? Json(*e.simulation) : Json::object();
  simulation["available"] = e.simulation.has_value();
  if (!e.simulation) simulation["why"] = e.no_simulation;
  j = {{"peak_bytes", e.peak.count()},
       {"required_bytes", e.required.count()},
       {"method", to_string(e.method)},
       {"phase", e.phase},
       {"stack", to_string(e.stack)},
       {"provenance", provenance_json<Json>(e)},
       {"closed_form", e.closed_form},
       {"simulation", std::move(simulation)}};
  if (e.verdict) j["verdict"] = *e.verdict;
  if (e.inputs.context.alloc_conf != AllocConf{}) j["alloc_conf"] = to_string(e.inputs.context.alloc_conf);
}

}  // namespace vramfit
