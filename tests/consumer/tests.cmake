# vramfit as a user gets it, run by ctest (label consumer): `cmake --install` of this build into a
# prefix, then consumer projects configured, built and run against it (run.cmake), one a component;
# the installed bin/vramfit and LICENSE; and a consumer through add_subdirectory.
set(consumer_dir ${CMAKE_CURRENT_BINARY_DIR}/consumer)
set(consumer_prefix ${consumer_dir}/prefix)

add_test(NAME consumer_install COMMAND ${CMAKE_COMMAND} -D "BUILD_DIR=${PROJECT_BINARY_DIR}" -D "PREFIX=${consumer_prefix}"
                                       -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/install.cmake)
set_tests_properties(consumer_install PROPERTIES FIXTURES_SETUP vramfit_installed LABELS consumer)

# vramfit_consumer_test(NAME SOURCE dir [INSTALLED] [CONFIGURE_ONLY] [ARGS configure args...] MATCH regex)
function(vramfit_consumer_test name)
  cmake_parse_arguments(PARSE_ARGV 1 test "INSTALLED;CONFIGURE_ONLY" "SOURCE;MATCH" "ARGS")
  set(args ${test_ARGS})
  if(test_INSTALLED)
    list(APPEND args "-DCMAKE_PREFIX_PATH=${consumer_prefix}")
  endif()
  string(REPLACE ";" "~~" args "${args}")
  add_test(NAME consumer_${name}
    COMMAND ${CMAKE_COMMAND} -D "SOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/consumer/${test_SOURCE}"
            -D "BINARY_DIR=${consumer_dir}/${name}" -D "GENERATOR=${CMAKE_GENERATOR}"
            -D "CXX_COMPILER=${CMAKE_CXX_COMPILER}" -D "CONFIGURE_ARGS=${args}"
            -D "CONFIGURE_ONLY=${test_CONFIGURE_ONLY}" -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.cmake)
  set_tests_properties(consumer_${name} PROPERTIES LABELS consumer PASS_REGULAR_EXPRESSION "${test_MATCH}")
  if(test_INSTALLED)
    set_tests_properties(consumer_${name} PROPERTIES FIXTURES_REQUIRED vramfit_installed)
  endif()
endfunction()

# The core needs fmt alone: found, built and run with nlohmann-json hidden from find_package.
# Each consumer's estimate simulates with the package's step programs: the installed ones, or the source tree's.
vramfit_consumer_test(find_package SOURCE find_package INSTALLED ARGS -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
  MATCH "consumer: peak [0-9]+ fits 24 GiB: true\nconsumer: allocator simulation with ${consumer_prefix}/${CMAKE_INSTALL_DATADIR}/vramfit/programs/hf-peft.programs")
vramfit_consumer_test(add_subdirectory SOURCE add_subdirectory ARGS "-DVRAMFIT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
  MATCH "consumer: peak [0-9]+ fits 24 GiB: true\nconsumer: allocator simulation with ${PROJECT_SOURCE_DIR}/tests/data/programs/hf-peft.programs")

if(TARGET vramfit::json)
  vramfit_consumer_test(find_package_json SOURCE find_package_json INSTALLED
    MATCH "json consumer: 1100048384 parameters, peak [0-9]+")
  # Asking for json where nlohmann-json cannot be found: vramfit is not found, and says why.
  vramfit_consumer_test(json_without_nlohmann SOURCE missing_component INSTALLED CONFIGURE_ONLY
    ARGS -DVRAMFIT_COMPONENT=json -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
    MATCH "vramfit found: (0|FALSE); [^\n]*nlohmann_json")
endif()
if(NOT TARGET vramfit::probe)
  vramfit_consumer_test(probe_not_built SOURCE missing_component INSTALLED CONFIGURE_ONLY ARGS -DVRAMFIT_COMPONENT=probe
    MATCH "vramfit found: (0|FALSE); this vramfit was built without its 'probe' component")
endif()
vramfit_consumer_test(unknown_component SOURCE missing_component INSTALLED CONFIGURE_ONLY ARGS -DVRAMFIT_COMPONENT=jsn
  MATCH "vramfit found: (0|FALSE); no component 'jsn'")

# The installed executable runs from the prefix, and the licence is installed beside the docs.
if(TARGET vramfit_cli)
  add_test(NAME consumer_installed_cli_version COMMAND ${consumer_prefix}/${CMAKE_INSTALL_BINDIR}/vramfit --version)
  set_tests_properties(consumer_installed_cli_version PROPERTIES FIXTURES_REQUIRED vramfit_installed LABELS consumer
    PASS_REGULAR_EXPRESSION "^vramfit ${PROJECT_VERSION}\n$")
  add_test(NAME consumer_installed_cli_predict
    COMMAND ${consumer_prefix}/${CMAKE_INSTALL_BINDIR}/vramfit predict --model SmolLM2-135M)
  set_tests_properties(consumer_installed_cli_predict PROPERTIES FIXTURES_REQUIRED vramfit_installed LABELS consumer
    PASS_REGULAR_EXPRESSION "peak: +[0-9.]+ GB")
  # The installed executable simulates with the step programs installed beside it, not the source tree's.
  add_test(NAME consumer_installed_cli_programs
    COMMAND ${consumer_prefix}/${CMAKE_INSTALL_BINDIR}/vramfit predict --model SmolLM2-135M --seq 1024)
  set_tests_properties(consumer_installed_cli_programs PROPERTIES FIXTURES_REQUIRED vramfit_installed LABELS consumer
    PASS_REGULAR_EXPRESSION "step programs: ${consumer_prefix}/${CMAKE_INSTALL_DATADIR}/vramfit/programs/hf-peft.programs")
  # Without the files (VRAMFIT_PROGRAMS_DIR names a directory without them): the closed form, saying why.
  add_test(NAME consumer_cli_without_programs COMMAND vramfit_cli predict --model SmolLM2-135M --seq 1024)
  set_tests_properties(consumer_cli_without_programs PROPERTIES LABELS consumer
    ENVIRONMENT "VRAMFIT_PROGRAMS_DIR=${CMAKE_CURRENT_BINARY_DIR}/no-programs"
    PASS_REGULAR_EXPRESSION "no allocator simulation: no built-in step programs: VRAMFIT_PROGRAMS_DIR: cannot read '[^']*hf-peft.programs': No such file")
endif()
# vramfit-record is installed with the modules it runs (share/vramfit/record); --help needs no torch.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME consumer_installed_record_help COMMAND ${consumer_prefix}/${CMAKE_INSTALL_BINDIR}/vramfit-record --help)
  set_tests_properties(consumer_installed_record_help PROPERTIES FIXTURES_REQUIRED vramfit_installed LABELS consumer
    ENVIRONMENT "PYTHON=${Python3_EXECUTABLE}" PASS_REGULAR_EXPRESSION "usage: vramfit-record")
endif()
add_test(NAME consumer_installed_license
  COMMAND ${CMAKE_COMMAND} -E cat ${consumer_prefix}/${CMAKE_INSTALL_DOCDIR}/LICENSE)
set_tests_properties(consumer_installed_license PROPERTIES FIXTURES_REQUIRED vramfit_installed LABELS consumer
  PASS_REGULAR_EXPRESSION "^MIT License")
