// The `vramfit` executable: examples/vramfit/cli.cpp's `run` on the command line's arguments.

#include <cstdio>
#include <string_view>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  return vramfit::cli::run(args, stdout, stderr);
}
