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
  target_link_libraries(${target} PRIVATE vramfit::json CLI11::CLI11 vramfit_warnings)
  target_compile_definitions(${target} PRIVATE VRAMFIT_VERSION="${PROJECT_VERSION}")
  if(TARGET vramfit::probe)
    target_link_libraries(${target} PRIVATE vramfit::probe)
    target_compile_definitions(${target} PUBLIC VRAMFIT_WITH_PROBE=1)
  endif()
endfunction()
