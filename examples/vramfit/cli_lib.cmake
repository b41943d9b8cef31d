# vramfit_add_cli_lib(TARGET): the vramfit CLI's subcommands (every examples/vramfit/*.cpp but
# main.cpp) as a static library, which the executable and the unit tests (examples/CMakeLists.txt)
# and the fuzz target (tests/fuzz/) link. Only the CLI needs CLI11.
find_package(CLI11 CONFIG REQUIRED)

function(vramfit_add_cli_lib target)
  set(sources cli.cpp common.cpp predict.cpp max.cpp sweep.cpp presets.cpp replay.cpp report.cpp)
  if(TARGET vramfit::probe)
    list(APPEND sources probe.cpp)
  endif()
  list(TRANSFORM sources PREPEND ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/)
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_FUNCTION_LIST_DIR})  # cli.hpp
  target_compile_features(${target} PUBLIC cxx_std_20)
  # Two unity translation units that the preset's 2 jobs build side by side: each source alone spends
  # most of its ~20 s (g++ -O3) on what they all include (CLI11, fmt and nlohmann-json header-only,
  # the step programs' data, the estimate), so one TU per source costs ~190 s of CPU; one TU for all
  # ~40 s of CPU but all of it on one core. Two batches cost a little more CPU than one and finish
  # sooner on 2 cores (the README's first command from scratch on 2 cores: 36.7 s one TU, 33.5 s two).
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  set_source_files_properties(${sources} PROPERTIES UNITY_GROUP b)
  set_source_files_properties(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cli.cpp ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/common.cpp
    ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/predict.cpp ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/presets.cpp
    PROPERTIES UNITY_GROUP a)
  target_link_libraries(${target} PRIVATE vramfit::json CLI11::CLI11 vramfit_warnings fmt::fmt)
  # The core asks for fmt header-only (no libfmt at run time for its users); the CLI links the compiled
  # libfmt instead, so its TUs do not compile fmt's formatting engine at -O3 again.
  target_compile_options(${target} PRIVATE -UFMT_HEADER_ONLY)
  target_compile_definitions(${target} PRIVATE VRAMFIT_VERSION="${PROJECT_VERSION}")
  if(TARGET vramfit::probe)
    target_link_libraries(${target} PRIVATE vramfit::probe)
    target_compile_definitions(${target} PUBLIC VRAMFIT_WITH_PROBE=1)
  endif()
endfunction()
