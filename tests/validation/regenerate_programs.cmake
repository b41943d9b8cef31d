# ctest programs.<stack> (tests/CMakeLists.txt): regenerates a built-in step-program file from
# the committed traces with trace_program.py and fails unless the result is the committed file,
# byte for byte, so the files stay what the traces in tests/data/traces/ give.
# cmake -D PYTHON=python3 -D SCRIPT=trace_program.py -D TRACE_ARGS="a;b" -D GENERATED=out.programs
#       -D COMMITTED=tests/data/programs/x.programs -P regenerate_programs.cmake
foreach(var PYTHON SCRIPT TRACE_ARGS GENERATED COMMITTED)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "regenerate_programs.cmake: -D ${var}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${TRACE_ARGS} --programs ${GENERATED}
                RESULT_VARIABLE status OUTPUT_VARIABLE log ERROR_VARIABLE log)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "trace_program.py failed (${status}):\n${log}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${GENERATED} ${COMMITTED} RESULT_VARIABLE differs)
if(NOT differs EQUAL 0)
  message(FATAL_ERROR "${COMMITTED} is not what its traces give (regenerated: ${GENERATED}); "
                      "regenerate it as its first lines say, or find what changed the traces or trace_program.py")
endif()
message(STATUS "${COMMITTED}: regenerated from its traces, identical")
