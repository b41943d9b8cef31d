#pragma once
/// @file detail/read_file.hpp
/// Reading a small input file whole (a config.json, a step-program file), with the error a user
/// should see for each way it can fail.

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "vramfit/error.hpp"

namespace vramfit::detail {

/// The text of the file at `path`, read up to `max_bytes` (a bound, so that `/dev/zero` or a pipe
/// is not read forever). Throws `InvalidInput` on `field`: for a file that cannot be read (a
/// directory, missing, unreadable: with the operating system's reason), or one larger than
/// `max_bytes` ("'PATH' is " + `too_large`).
inline std::string read_bounded_file(const std::filesystem::path& path, std::string_view field, std::size_t max_bytes,
                                     std::string_view too_large) {
  const auto unreadable = [&](int error) {
    return InvalidInput(field, "cannot read '" + path.string() + "': " + std::strerror(error));
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw unreadable(EISDIR);
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw unreadable(errno);
  std::string text;
  char buffer[1 << 14];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0 && text.size() <= max_bytes) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (text.size() > max_bytes) throw InvalidInput(field, "'" + path.string() + "' is " + std::string(too_large));
  if (failed) throw unreadable(error);
  return text;
}

}  // namespace vramfit::detail
