// detail::load_trace on arbitrary JSON lines, then its replay through the allocator model at
// every segment placement: a trace whose frees name earlier live requests and whose replay
// keeps requested <= allocated <= reserved, or InvalidInput (or Overflow).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "vramfit/detail/replay.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  using Order = vramfit::detail::CachingAllocatorModel::AddressOrder;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  const auto t = vramfit::fuzz::attempt([&] { return vramfit::detail::load_trace(in, "fuzz.jsonl"); });
  if (!t) return 0;
  std::vector<bool> freed;
  for (const std::int64_t v : t->events) {
    check(v != 0, "a trace event is a request or a free");
    if (v > 0) {
      freed.push_back(false);
      continue;
    }
    const auto k = static_cast<std::uint64_t>(-(v + 1));  // -v - 1 without negating INT64_MIN
    check(k < freed.size() && !freed[k], "a free names an earlier request not yet freed");
    freed[k] = true;
  }
  for (const Order order : {Order::ascending, Order::descending, Order::driver, Order::scattered}) {
    const std::uint64_t headroom = order == Order::scattered ? 1 : 0;
    const auto r = vramfit::fuzz::attempt([&] { return vramfit::detail::replay_trace(*t, order, headroom); });
    if (!r) continue;
    check(r->peak_requested <= r->peak_allocated, "requested bytes never exceed allocated bytes");
    check(r->peak_allocated >= t->baseline, "the peak includes the baseline");
    check(r->peak_allocated - t->baseline <= r->reserved, "allocated bytes sit in reserved segments");
  }
  return 0;
}
