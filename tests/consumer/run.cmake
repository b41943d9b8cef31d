# Configures, builds and runs one consumer project the way a user does, for the consumer tests:
#   cmake -D SOURCE_DIR=... -D BINARY_DIR=... -D GENERATOR=... -D CXX_COMPILER=...
#         [-D CONFIGURE_ARGS=a~~b] [-D CONFIGURE_ONLY=ON] -P run.cmake
# The build folder starts empty; the project's executable is `consumer`. Output passes through,
# for the test's PASS_REGULAR_EXPRESSION.
string(REPLACE "~~" ";" configure_args "${CONFIGURE_ARGS}")
file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BINARY_DIR}" -G "${GENERATOR}"
                        "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Release ${configure_args}
                RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "configuring ${SOURCE_DIR} failed")
endif()
if(CONFIGURE_ONLY)
  return()
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BINARY_DIR}" RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "building ${SOURCE_DIR} failed")
endif()
execute_process(COMMAND "${BINARY_DIR}/consumer" RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${BINARY_DIR}/consumer failed: ${failed}")
endif()
