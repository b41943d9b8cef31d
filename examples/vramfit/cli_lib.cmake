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
  # One translation unit: each source alone spends most of its ~20 s (g++ -O3) on what they all
  # include and instantiate (CLI11's validators, fmt and nlohmann-json header-only, the step
  # programs' data, the estimate); together they build in about 40 s of CPU instead of about 190 s
  # for the README's first command. Two batches cost more in all than one (measured).
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  target_link_libraries(${target} PRIVATE vramfit::json CLI11::CLI11 vramfit_warnings)
  target_compile_definitions(${target} PRIVATE VRAMFIT_VERSION="${PROJECT_VERSION}")
  if(TARGET vramfit::probe)
    target_link_libraries(${target} PRIVATE vramfit::probe)
    target_compile_definitions(${target} PUBLIC VRAMFIT_WITH_PROBE=1)
  endif()
endfunction()
