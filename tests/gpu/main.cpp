// The GPU tests' own main: it decides at run time whether a CUDA device exists (as PyTorch's
// test/cpp/api/main.cpp does) and, without one, exits 77 so that ctest (SKIP_RETURN_CODE 77)
// reports the tests as skipped rather than passed.

#include <cstdio>

#include <torch/cuda.h>

#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest_after_torch.hpp"

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::puts("no CUDA device: GPU tests skipped");
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const int result = context.run();
  return result == 77 ? 1 : result;  // 77 means "skipped" to ctest: never report a failure as that
}
