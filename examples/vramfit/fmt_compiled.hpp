#pragma once
/// @file fmt_compiled.hpp
/// Forced first into every CLI translation unit (cli_lib.cmake): the CLI links the compiled libfmt,
/// yet fmt 9's format.h defines `detail::vformat_to<char>`, its whole formatting engine (floats
/// included), as a template that every TU calling `fmt::format_to` instantiates and optimises again
/// (~90 KB of code, ~3 s of g++ -O3 per TU). libfmt.so.9 exports that instantiation (format.cc
/// defines it), so it is declared extern here, as fmt 10's format.h does itself. g++ only: clang
/// mangles that template's dependent parameter type otherwise (`sr3std7is_same...EE` where g++,
/// which built Debian's libfmt, writes `srSt7is_same...E`), so a clang TU (the fuzz build) would
/// ask libfmt for a symbol it does not export.

#include <fmt/core.h>

#if defined(__GNUC__) && !defined(__clang__) && !defined(FMT_HEADER_ONLY) && FMT_VERSION >= 90000 && FMT_VERSION < 100000
FMT_BEGIN_NAMESPACE
namespace detail {
extern template FMT_API void vformat_to<char>(buffer<char>&, basic_string_view<char>,
                                              basic_format_args<buffer_context<char>>, locale_ref);
}  // namespace detail
FMT_END_NAMESPACE
#endif
