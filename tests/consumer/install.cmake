# `cmake --install BUILD_DIR --prefix PREFIX` into an emptied PREFIX, so that nothing an earlier
# install left there (a file since renamed) can stand in for what this one installs.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed")
endif()
