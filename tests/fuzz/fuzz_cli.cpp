// vramfit::cli::run (the `vramfit` command line, in-process) on arbitrary arguments, one per line
// of the input: exit 0 or 3 with nothing on stderr, or exit 2 with one line "vramfit: error: ...".
// Exit 1 (an exception the CLI did not turn into bad input) and anything escaping `run` are
// findings. Paths in the input are read relative to the working directory: run it from the
// repository's root so that tests/data/... resolves.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "fuzz.hpp"

namespace {

/// What `run` wrote to one of its streams.
class Captured {
public:
  Captured() : file_(open_memstream(&data_, &size_)) { vramfit::fuzz::check(file_ != nullptr, "open_memstream"); }
  ~Captured() {
    if (file_ != nullptr) std::fclose(file_);
    std::free(data_);
  }
  Captured(const Captured&) = delete;
  Captured& operator=(const Captured&) = delete;

  [[nodiscard]] std::FILE* file() const { return file_; }
  [[nodiscard]] std::string_view text() {
    std::fflush(file_);
    return {data_, size_};
  }

private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // `--config /dev/stdin` would wait for a terminal: the CLI reads an empty file instead.
  vramfit::fuzz::check(std::freopen("/dev/null", "r", stdin) != nullptr, "stdin from /dev/null");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using vramfit::fuzz::check;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (text.ends_with('\n')) text.remove_suffix(1);  // a seed file's last line
  std::vector<std::string_view> args;  // "" is no argument; "a\n\n" is "a" and ""
  while (!text.empty() || !args.empty()) {
    const auto end = text.find('\n');
    args.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  Captured out, err;
  const int status = vramfit::cli::run(args, out.file(), err.file());
  const std::string_view message = err.text();
  if (status == 0 || status == 3) {
    check(message.empty(), "exit 0 or 3 with something on stderr");
  } else if (status == 2) {
    check(message.starts_with("vramfit: error: "), "exit 2 without 'vramfit: error: ' on stderr");
    check(message.find('\n') == message.size() - 1, "exit 2 with other than one line on stderr");
    const std::string_view line = message.substr(std::string_view("vramfit: error: ").size());
    check(!line.starts_with(":") && line.find(": ") != std::string_view::npos, "exit 2 naming no flag");
  } else {
    vramfit::fuzz::fail("exit " + std::to_string(status) + " (1: an error that is not bad input): " +
                        std::string(message));
  }
  return 0;
}
