# Runs a program once and checks its exit code and output; the CLI runs of examples/tests.cmake.
#
#   cmake -D COMMAND=program~~arg~~arg -D EXIT_CODE=n
#         [-D STDOUT_MATCHES=regex~~regex] [-D STDOUT_LINES=n] [-D STDERR_CONTAINS=text]
#         -P cli_expect.cmake
#
# "~~" separates list items: a ';' would split the -D argument itself. Every regex must match
# stdout. With STDERR_CONTAINS the run is an error: stdout must be empty and stderr exactly one
# line, "vramfit: error: ...", holding that text. Without it stderr must be empty.

foreach(required COMMAND EXIT_CODE)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "cli_expect.cmake: -D ${required}=... is required")
  endif()
endforeach()

string(REPLACE "~~" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE exit_code OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)

set(failures "")
if(NOT exit_code STREQUAL EXIT_CODE)
  string(APPEND failures "exit code ${exit_code}, expected ${EXIT_CODE}\n")
endif()

# Split by hand, not as a CMake list: a list would not split after a '[' without its ']'.
set(patterns "${STDOUT_MATCHES}")
while(NOT patterns STREQUAL "")
  string(FIND "${patterns}" "~~" separator)
  if(separator EQUAL -1)
    set(pattern "${patterns}")
    set(patterns "")
  else()
    string(SUBSTRING "${patterns}" 0 ${separator} pattern)
    math(EXPR next "${separator} + 2")
    string(SUBSTRING "${patterns}" ${next} -1 patterns)
  endif()
  if(NOT stdout MATCHES "${pattern}")
    string(APPEND failures "stdout does not match: ${pattern}\n")
  endif()
endwhile()

if(DEFINED STDOUT_LINES)
  string(REGEX MATCHALL "\n" newlines "${stdout}")
  list(LENGTH newlines lines)
  if(NOT lines EQUAL STDOUT_LINES)
    string(APPEND failures "stdout has ${lines} lines, expected ${STDOUT_LINES}\n")
  endif()
endif()

if(DEFINED STDERR_CONTAINS)
  if(NOT stdout STREQUAL "")
    string(APPEND failures "stdout is not empty on an error\n")
  endif()
  if(NOT stderr MATCHES "^vramfit: error: [^\n]+\n$")
    string(APPEND failures "stderr is not one line starting 'vramfit: error: '\n")
  endif()
  string(FIND "${stderr}" "${STDERR_CONTAINS}" position)
  if(position EQUAL -1)
    string(APPEND failures "stderr does not name '${STDERR_CONTAINS}'\n")
  endif()
elseif(NOT stderr STREQUAL "")
  string(APPEND failures "stderr is not empty\n")
endif()

if(failures)
  message(FATAL_ERROR "${failures}--- command: ${command}\n--- stdout:\n${stdout}--- stderr:\n${stderr}")
endif()
