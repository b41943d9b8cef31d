# Tests of the examples and a few end-to-end runs of the vramfit executable; included by
# examples/CMakeLists.txt. The examples are checked by their output. The CLI's behaviour is tested
# in-process in tests/cli_test.cpp; the runs here (label cli) check the executable itself through
# cli_expect.cmake: its exit code (0, 2 for bad input with one line on stderr naming the flag, 3
# when a step does not fit) and its output.

foreach(example fit_check compile_time_fit)
  if(TARGET ${example})
    add_test(NAME example.${example} COMMAND ${example})
    set_tests_properties(example.${example} PROPERTIES LABELS example)
  endif()
endforeach()
if(TARGET fit_check)
  set_tests_properties(example.fit_check PROPERTIES PASS_REGULAR_EXPRESSION "fits: (yes|no)")
endif()
if(TARGET compile_time_fit)
  set_tests_properties(example.compile_time_fit PROPERTIES PASS_REGULAR_EXPRESSION "compile-time check passed")
endif()

# vramfit_cli_test(NAME EXIT code ARGS args... [MATCH regex...] [LINES n] [ERROR text])
# Runs `vramfit ARGS`; checks the exit code, that every MATCH regex matches stdout, that stdout
# has LINES lines, and with ERROR that stderr is one error line holding that text.
function(vramfit_cli_test name)
  cmake_parse_arguments(PARSE_ARGV 1 test "" "EXIT;LINES;ERROR" "ARGS;MATCH")
  set(command "$<TARGET_FILE:vramfit_cli>")
  if(test_ARGS)
    string(REPLACE ";" "~~" arguments "${test_ARGS}")  # not list(JOIN): it would not split after a '['
    string(APPEND command "~~${arguments}")
  endif()
  set(defines -D "COMMAND=${command}" -D "EXIT_CODE=${test_EXIT}")
  if(test_MATCH)
    string(REPLACE ";" "~~" patterns "${test_MATCH}")
    list(APPEND defines -D "STDOUT_MATCHES=${patterns}")
  endif()
  if(DEFINED test_LINES)
    list(APPEND defines -D "STDOUT_LINES=${test_LINES}")
  endif()
  if(DEFINED test_ERROR)
    list(APPEND defines -D "STDERR_CONTAINS=${test_ERROR}")
  endif()
  add_test(NAME cli.${name} COMMAND ${CMAKE_COMMAND} ${defines} -P ${CMAKE_CURRENT_SOURCE_DIR}/cli_expect.cmake)
  set_tests_properties(cli.${name} PROPERTIES LABELS cli)
endfunction()

set(small --model SmolLM2-135M)

vramfit_cli_test(report EXIT 0 MATCH "SmolLM2-135M" "Llama-3.1-8B" "RTX-4090 +A100-40GB +H100-80GB +H200" "H200 +150.110 +149.306 +measured")
vramfit_cli_test(help EXIT 0 ARGS --help MATCH "usage: vramfit" "max-batch" "exit status")
vramfit_cli_test(predict.json EXIT 0 ARGS predict ${small} --json
  MATCH "^{.*}\n$" "\"peak_bytes\": *[0-9]+" "\"step\": *{")
vramfit_cli_test(predict.does_not_fit EXIT 3 ARGS predict --model Qwen2.5-7B --mode full --budget 24GB
  MATCH "\ndoes not fit the budget of 24.000 GB")
vramfit_cli_test(error.batch_zero EXIT 2 ERROR "--batch" ARGS predict ${small} --batch 0)
vramfit_cli_test(error.unknown_flag EXIT 2 ERROR "--frob" ARGS predict ${small} --frob)
vramfit_cli_test(max-batch EXIT 0 ARGS max-batch ${small} --budget 24GiB MATCH "max batch: [1-9][0-9]*\n")
vramfit_cli_test(replay EXIT 0 ARGS replay --data ${PROJECT_SOURCE_DIR}/tests/data/hf_steps.jsonl
  MATCH "pred/real +verdict" "over-predicts: safe")
