# Two consumer projects, each configured, built and run by ctest: one through the installed
# package (find_package), one through add_subdirectory.
set(consumer_dir ${CMAKE_CURRENT_BINARY_DIR}/consumer)
set(consumer_generator_args -G "${CMAKE_GENERATOR}" -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})

add_test(NAME consumer_install
  COMMAND ${CMAKE_COMMAND} --install ${PROJECT_BINARY_DIR} --prefix ${consumer_dir}/prefix)
set_tests_properties(consumer_install PROPERTIES FIXTURES_SETUP vramfit_installed LABELS consumer)

add_test(NAME consumer_find_package
  COMMAND bash -c
    "rm -rf '${consumer_dir}/find_package' && '${CMAKE_COMMAND}' -S '${CMAKE_CURRENT_SOURCE_DIR}/consumer/find_package' -B '${consumer_dir}/find_package' -DCMAKE_PREFIX_PATH='${consumer_dir}/prefix' -DCMAKE_BUILD_TYPE=Release && '${CMAKE_COMMAND}' --build '${consumer_dir}/find_package' && '${consumer_dir}/find_package/consumer'")
set_tests_properties(consumer_find_package PROPERTIES FIXTURES_REQUIRED vramfit_installed LABELS consumer
  PASS_REGULAR_EXPRESSION "consumer: peak [0-9]+ fits 24 GiB: true")

add_test(NAME consumer_add_subdirectory
  COMMAND bash -c
    "rm -rf '${consumer_dir}/add_subdirectory' && '${CMAKE_COMMAND}' -S '${CMAKE_CURRENT_SOURCE_DIR}/consumer/add_subdirectory' -B '${consumer_dir}/add_subdirectory' -DVRAMFIT_SOURCE_DIR='${PROJECT_SOURCE_DIR}' -DCMAKE_BUILD_TYPE=Release && '${CMAKE_COMMAND}' --build '${consumer_dir}/add_subdirectory' && '${consumer_dir}/add_subdirectory/consumer'")
set_tests_properties(consumer_add_subdirectory PROPERTIES LABELS consumer
  PASS_REGULAR_EXPRESSION "consumer: peak [0-9]+ fits 24 GiB: true")
