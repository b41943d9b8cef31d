#pragma once
/// @file probe/instruments.hpp
/// The small measurements that pin single terms of the model, each taken on the GPU it is run on
/// and returned as plain structs with a JSON line for `tests/data/`:
/// - `measure_loss_bytes`: bytes per logits element that cross-entropy adds over the logits, with
///   and without the fp32 upcast;
/// - `measure_sdpa_extra`: what one head of SDPA allocates, for each backend forced in turn and
///   for the default choice;
/// - `stack_record`: the GPU, driver, CUDA and torch versions every measurement is recorded with.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include "vramfit/bytes.hpp"
#include "vramfit/probe/meter.hpp"
#include "vramfit/probe/reference_step.hpp"

namespace vramfit::probe {

// ---- the stack ------------------------------------------------------------------------------------

/// The GPU and software a measurement was taken on.
struct StackRecord {
  int device = 0;
  std::string gpu_name;
  Bytes total_memory;
  int compute_major = 0;
  int compute_minor = 0;
  std::string nvidia_driver;     ///< "580.126.09"; empty where /proc/driver/nvidia/version is hidden
  int cuda_driver_api = 0;       ///< CUDA version the driver supports (13000 = 13.0)
  int cuda_runtime = 0;          ///< CUDA runtime in the process (13000 = 13.0)
  std::string torch_version;     ///< TORCH_VERSION of the headers built against ("2.11.0")
  std::optional<long> cudnn_version;  ///< cuDNN torch was built with (91500 = 9.15.0), if any
};

/// Reads the stack of `device`. Throws `InvalidInput` ("device") without such a CUDA device.
inline StackRecord stack_record(int device = 0) {
  const DeviceFacts facts = device_facts(device);
  StackRecord r;
  r.device = device;
  r.gpu_name = facts.name;
  r.total_memory = facts.total_memory;
  r.compute_major = facts.compute_major;
  r.compute_minor = facts.compute_minor;
  r.nvidia_driver = nvidia_driver_version();
  r.cuda_driver_api = cuda_driver_version();
  r.cuda_runtime = cuda_runtime_version();
  r.torch_version = TORCH_VERSION;
  try {
    r.cudnn_version = at::detail::getCUDAHooks().versionCuDNN();
  } catch (const c10::Error&) {
    r.cudnn_version = std::nullopt;  // built without cuDNN
  }
  return r;
}

inline nlohmann::json to_json(const StackRecord& s) {
  nlohmann::json j;
  j["device"] = s.device;
  j["gpu"] = s.gpu_name;
  j["total_memory"] = s.total_memory.count();
  j["compute_capability"] = std::to_string(s.compute_major) + "." + std::to_string(s.compute_minor);
  j["nvidia_driver"] = s.nvidia_driver;
  j["cuda_driver_api"] = cuda_version_string(s.cuda_driver_api);
  j["cuda_runtime"] = cuda_version_string(s.cuda_runtime);
  j["torch"] = s.torch_version;
  j["cudnn"] = s.cudnn_version ? nlohmann::json(*s.cudnn_version) : nlohmann::json(nullptr);
  return j;
}

/// One line of JSON: the stack alone.
inline std::string to_json_line(const StackRecord& s) { return nlohmann::json{{"stack", probe::to_json(s)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

/// One instrument's JSON line: its name, its fields and the stack record.
inline std::string instrument_line(std::string_view instrument, nlohmann::json fields, const StackRecord& stack) {
  fields["instrument"] = instrument;
  fields["stack"] = probe::to_json(stack);
  return fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// ---- spread ---------------------------------------------------------------------------------------

namespace detail {
inline double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
/// max - min: the record's "spread".
inline double spread(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}
}  // namespace detail

// ---- (a) the loss's bytes per logits element ----------------------------------------------------

/// Peaks of allocated bytes over what was allocated before an op: after its forward, and after
/// its backward too.
struct ExtraPeaks {
  Bytes forward, total;
};
template <class Forward, class Backward>
ExtraPeaks extra_peaks(PeakMeter& meter, Forward forward, Backward backward) {
  meter.synchronize();
  const Bytes base = meter.allocated();
  meter.reset();
  torch::Tensor out = forward();
  meter.synchronize();
  ExtraPeaks peaks{.forward = meter.peak_allocated() - base, .total = {}};
  backward(out);
  meter.synchronize();
  peaks.total = meter.peak_allocated() - base;
  return peaks;
}

/// Extra peak of cross-entropy over its (tokens x vocab) bf16 logits, per logits element.
struct LossBytes {
  std::uint64_t vocab = 0;
  std::uint64_t tokens = 0;
  bool upcast = false;  ///< `logits.to(float)` before `cross_entropy`
  std::vector<double> forward;  ///< forward alone, one value per repeat
  std::vector<double> total;    ///< forward and backward (the logits' grad included), per repeat

  [[nodiscard]] double mean() const { return detail::mean(total); }
  [[nodiscard]] double spread() const { return detail::spread(total); }
  [[nodiscard]] double forward_mean() const { return detail::mean(forward); }
};

/**
 * For each vocabulary, both loss variants and `repeats` repeats: bf16 logits (tokens x vocab) that
 * require grad, random labels; the allocated bytes with the logits alive are the baseline; then
 * `cross_entropy(logits, labels)` (or on `logits.to(float)`) and `backward()`. The extra peak over
 * the baseline, divided by tokens x vocab, is the figure. The logits' own 2 B/element are not in
 * it; the grad of the logits is.
 */
inline std::vector<LossBytes> measure_loss_bytes(PeakMeter& meter, const std::vector<std::uint64_t>& vocabs,
                                                 std::uint64_t tokens = 4096, int repeats = 3) {
  const DeviceScope on_device(meter.device());
  const auto device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(meter.device()));
  const auto bf16 = torch::TensorOptions().dtype(at::kBFloat16).device(device);
  const auto i64 = torch::TensorOptions().dtype(at::kLong).device(device);
  const auto t = static_cast<std::int64_t>(tokens);
  std::vector<LossBytes> rows;
  for (std::uint64_t vocab : vocabs) {
    const auto v = static_cast<std::int64_t>(vocab);
    const double elements = static_cast<double>(tokens) * static_cast<double>(vocab);
    for (bool upcast : {false, true}) {
      LossBytes row;
      row.vocab = vocab;
      row.tokens = tokens;
      row.upcast = upcast;
      for (int r = 0; r < repeats; ++r) {
        torch::Tensor logits;
        torch::Tensor labels;
        {
          torch::NoGradGuard no_grad;
          logits = torch::randn({t, v}, bf16);
          labels = torch::randint(v, {t}, i64);
        }
        logits.requires_grad_(true);
        const ExtraPeaks extra = extra_peaks(
            meter, [&] { return at::cross_entropy_loss(upcast ? logits.to(at::kFloat) : logits, labels); },
            [](torch::Tensor& loss) { loss.backward(); });
        row.forward.push_back(static_cast<double>(extra.forward.count()) / elements);
        row.total.push_back(static_cast<double>(extra.total.count()) / elements);
      }
      rows.push_back(std::move(row));
    }
  }
  meter.empty_cache();
  return rows;
}

inline std::string to_json_line(const LossBytes& row, const StackRecord& stack) {
  return instrument_line("loss_bytes_per_element",
                         {{"vocab", row.vocab}, {"tokens", row.tokens}, {"logits_dtype", "bf16"},
                          {"upcast", row.upcast}, {"forward", row.forward}, {"total", row.total},
                          {"mean", row.mean()}, {"spread", row.spread()}},
                         stack);
}

// ---- (b) SDPA's extra allocation for one head -----------------------------------------------------

/// What SDPA allocates over q, k, v (batch 1, `heads` heads, `seq`, head_dim), causal, when only
/// `backend` may run ("default": the flags as they were).
struct SdpaExtra {
  std::uint64_t seq = 0;
  std::uint64_t head_dim = 0;
  std::uint64_t heads = 0;
  std::string dtype;
  std::string backend;             ///< "flash", "mem-efficient", "math", "cudnn" or "default"
  std::string chosen;              ///< what `at::_fused_sdp_choice` picked under those flags
  std::optional<Bytes> forward;    ///< extra peak of the forward; empty when the backend cannot run
  std::optional<Bytes> total;      ///< extra peak of forward and backward
  std::string error;               ///< why it could not run
};

namespace detail {
/// Runs one matmul forward and backward so that the cuBLAS workspaces of this thread and of the
/// autograd engine's thread exist before a baseline is read: they are allocated on first use and
/// kept, and would otherwise land in whichever measurement first multiplies.
inline void create_blas_workspaces(const torch::Device& device, at::ScalarType dtype) {
  torch::Tensor a = torch::randn({64, 64}, torch::TensorOptions().dtype(dtype).device(device)).requires_grad_(true);
  at::matmul(a, a).sum().backward();
}
}  // namespace detail

/**
 * For each sequence length and each backend (flash, mem-efficient, math, cudnn, then the default
 * flags): q, k, v of (1, heads, seq, head_dim), stored (1, seq, heads, head_dim) as a model's
 * projections produce them, in `dtype`, requiring grad; baseline with them alive (and the cuBLAS
 * workspaces already created); `scaled_dot_product_attention(..., is_causal=true)` (forward),
 * then `.sum().backward()`. A backend that cannot run there is recorded with its error instead.
 */
inline std::vector<SdpaExtra> measure_sdpa_extra(PeakMeter& meter, const std::vector<std::uint64_t>& seqs,
                                                 std::uint64_t head_dim = 64, std::uint64_t heads = 1,
                                                 at::ScalarType dtype = at::kBFloat16) {
  const DeviceScope on_device(meter.device());
  const auto device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(meter.device()));
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  detail::create_blas_workspaces(device, dtype);
  struct Arm {
    const char* name;
    std::optional<SdpFlags> flags;
  };
  const Arm arms[] = {{"flash", SdpFlags::only(Attention::flash)},
                      {"mem-efficient", SdpFlags::only(Attention::mem_efficient)},
                      {"math", SdpFlags::only(Attention::math)},
                      {"cudnn", SdpFlags::only_cudnn()},
                      {"default", std::nullopt}};
  std::vector<SdpaExtra> rows;
  for (std::uint64_t seq : seqs) {
    for (const Arm& arm : arms) {
      SdpaExtra row;
      row.seq = seq;
      row.head_dim = head_dim;
      row.heads = heads;
      row.dtype = dtype_name(dtype);
      row.backend = arm.name;
      {
        const SdpScope flags(arm.flags.value_or(SdpFlags::current()));
        // Stored (batch, seq, heads, head_dim) and viewed (batch, heads, seq, head_dim), as a model's
        // projections produce them: the layout cuDNN's kernel requires, the others accept.
        torch::Tensor q_base, k_base, v_base;
        {
          torch::NoGradGuard no_grad;
          const std::int64_t shape[] = {1, static_cast<std::int64_t>(seq), static_cast<std::int64_t>(heads),
                                        static_cast<std::int64_t>(head_dim)};
          q_base = torch::randn(at::IntArrayRef(shape), opts);
          k_base = torch::randn(at::IntArrayRef(shape), opts);
          v_base = torch::randn(at::IntArrayRef(shape), opts);
        }
        q_base.requires_grad_(true);
        k_base.requires_grad_(true);
        v_base.requires_grad_(true);
        const torch::Tensor q = q_base.transpose(1, 2);
        const torch::Tensor k = k_base.transpose(1, 2);
        const torch::Tensor v = v_base.transpose(1, 2);
        try {
          row.chosen = sdp_backend_name(at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true));
          const ExtraPeaks extra = extra_peaks(
              meter, [&] { return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true); },
              [](torch::Tensor& out) { out.sum().backward(); });
          row.forward = extra.forward;
          row.total = extra.total;
        } catch (const c10::Error& e) {
          row.forward.reset();
          row.total.reset();
          const std::string what = e.what_without_backtrace();
          row.error = what.substr(0, what.find('\n'));
        }
      }
      rows.push_back(std::move(row));
    }
  }
  meter.empty_cache();
  return rows;
}

inline std::string to_json_line(const SdpaExtra& row, const StackRecord& stack) {
  const auto bytes_or_null = [](const std::optional<Bytes>& b) { return b ? nlohmann::json(b->count()) : nlohmann::json(); };
  nlohmann::json fields = {{"seq", row.seq},         {"head_dim", row.head_dim},
                           {"heads", row.heads},     {"dtype", row.dtype},
                           {"causal", true},         {"backend", row.backend},
                           {"chosen", row.chosen},   {"forward_extra", bytes_or_null(row.forward)},
                           {"total_extra", bytes_or_null(row.total)}};
  if (!row.error.empty()) fields["error"] = row.error;
  return instrument_line("sdpa_extra", std::move(fields), stack);
}

}  // namespace vramfit::probe
