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
  # -O1, not the Release -O3: the README's first command builds this. On this 2-core EPYC, each
  # group alone: flags 15.3 -> 12.4 s, commands 20.3 -> 15.0 s of CPU from -O2 to -O1 (-O3 more),
  # while the simulation runs as fast (fit_verdict on one core, LoRA q,k,v,o seq 4096, 30 runs:
  # 1.19-1.20 s at -O1, 1.18-1.21 s at -O2). The library's benchmarks keep -O3.
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O1>)
  target_compile_definitions(${target} PRIVATE VRAMFIT_VERSION="${PROJECT_VERSION}")
  if(TARGET vramfit::probe)
    target_link_libraries(${target} PRIVATE vramfit::probe)
    target_compile_definitions(${target} PUBLIC VRAMFIT_WITH_PROBE=1)
  endif()
endfunction()
