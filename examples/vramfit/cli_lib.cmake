# vramfit_add_cli_lib(TARGET): the vramfit CLI's subcommands (every examples/vramfit/*.cpp but
# main.cpp) as a static library, which the executable and the unit tests (examples/CMakeLists.txt)
# and the fuzz target (tests/fuzz/) link. Only the CLI needs CLI11.
find_package(CLI11 CONFIG REQUIRED)

function(vramfit_add_cli_lib target)
  set(sources cli.cpp flags.cpp common.cpp predict.cpp max.cpp sweep.cpp presets.cpp replay.cpp report.cpp)
  if(TARGET vramfit::probe)
    list(APPEND sources probe.cpp)
  endif()
  list(TRANSFORM sources PREPEND ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/)
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_FUNCTION_LIST_DIR})  # cli.hpp
  target_compile_features(${target} PUBLIC cxx_std_20)
  # Two unity translation units that the preset's 2 jobs build side by side, each header-only
  # library compiled in as few of them as it can be: CLI11 (~10 s of g++ -O3 wherever it is
  # included) only in `flags` (cli.cpp, flags.cpp, and presets.cpp, which estimates nothing); the
  # library's estimate (its allocator simulation) only in `commands`, the subcommands and their
  # output. Alone on this 2-core EPYC at -O3: flags ~20 s, commands ~25 s (the two groups before,
  # which each held both: ~38 s and ~33 s).
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  set_source_files_properties(${sources} PROPERTIES UNITY_GROUP commands)
  set_source_files_properties(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cli.cpp ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/flags.cpp
    ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/presets.cpp
    PROPERTIES UNITY_GROUP flags)
  target_link_libraries(${target} PRIVATE vramfit::json CLI11::CLI11 vramfit_warnings fmt::fmt)
  # The core asks for fmt header-only (no libfmt at run time for its users); the CLI links the compiled
  # libfmt instead, and fmt_compiled.hpp keeps its TUs from compiling fmt's formatting engine again.
  target_compile_options(${target} PRIVATE -UFMT_HEADER_ONLY
                         -include ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/fmt_compiled.hpp)
  # -O2, not the Release -O3: a quarter less compile time for each group (flags ~20 -> ~17 s,
  # commands ~25-34 -> ~22-24 s, alone on this machine) at ~2% of the simulation's speed (fit_verdict,
  # one core: 40.9 ms at -O3, 41.7 ms at -O2). The library's benchmarks keep -O3.
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O2>)
  target_compile_definitions(${target} PRIVATE VRAMFIT_VERSION="${PROJECT_VERSION}")
  if(TARGET vramfit::probe)
    target_link_libraries(${target} PRIVATE vramfit::probe)
    target_compile_definitions(${target} PUBLIC VRAMFIT_WITH_PROBE=1)
  endif()
endfunction()
