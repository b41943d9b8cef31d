#pragma once
/// @file cli.hpp
/// The `vramfit` command line as a function, so that tests run it in-process:
///
///     const std::vector<std::string_view> args = {"predict", "--model", "Qwen2.5-0.5B", "--json"};
///     const int status = vramfit::cli::run(args, stdout, stderr);

#include <cstdio>
#include <span>
#include <string_view>

namespace vramfit::cli {

/// Runs `vramfit ARGS...` (the arguments after the program's name), writing to `out` and `err`.
/// Returns the exit status: 0 success; 2 bad input, with one line on `err`, "vramfit: error: FLAG:
/// message"; 3 a step that does not fit its --budget (replay: an under-prediction); 1 any other
/// failure.
int run(std::span<const std::string_view> args, std::FILE* out, std::FILE* err);

}  // namespace vramfit::cli
