# Tests of the examples and of the vramfit CLI; included by examples/CMakeLists.txt.
# The examples are checked by their output; the CLI tests (label cli) run
# cli_expect.cmake, which checks the exit code as well: 0, 2 for bad input (one line on stderr
# naming the flag) and 3 when the step does not fit --budget.

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

# Config files for --config, written at configure time.
set(cli_configs ${CMAKE_CURRENT_BINARY_DIR}/cli_configs)
file(WRITE ${cli_configs}/tiny-llama.json [[{
  "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 2048,
  "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
  "tie_word_embeddings": false
}
]])
file(WRITE ${cli_configs}/string-hidden-size.json [[{
  "model_type": "llama", "vocab_size": 32000, "hidden_size": "2048", "intermediate_size": 5632,
  "num_hidden_layers": 22, "num_attention_heads": 32
}
]])
file(WRITE ${cli_configs}/malformed.json "{\"model_type\": \"llama\",\n \"vocab_size\": 32000,,}\n")

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

# vramfit_cli_error(NAME FLAG args...): bad input; exit 2 and one line on stderr naming FLAG.
function(vramfit_cli_error name flag)
  vramfit_cli_test(error.${name} EXIT 2 ERROR "${flag}" ARGS ${ARGN})
endfunction()

set(small --model SmolLM2-135M)
set(json_number "[0-9]+")

# ---- the report, the version and the help ----------------------------------------------------
vramfit_cli_test(report EXIT 0
  MATCH "SmolLM2-135M" "Qwen2.5-0.5B" "Llama-3.2-1B" "Qwen2.5-7B" "Llama-3.1-8B" "full fine-tuning"
        "all-linear, gradient checkpointing" "24 GB +48 GB +80 GB +141 GB" "less 1 GiB" "loss backward")
vramfit_cli_test(version EXIT 0 ARGS --version MATCH "^vramfit [0-9]+\\.[0-9]+\\.[0-9]+\n$")
vramfit_cli_test(help EXIT 0 ARGS --help
  MATCH "usage: vramfit" "predict" "max-batch" "max-seq" "sweep" "presets" "probe" "exit status")
vramfit_cli_test(help.short EXIT 0 ARGS -h MATCH "usage: vramfit")
set(model_flags --model --config --mode --lora-rank --lora-targets --grad-ckpt --logits-retained --attention
    --stack --phase --precision --budget --json --help)
vramfit_cli_test(help.predict EXIT 0 ARGS predict --help
  MATCH "usage: vramfit predict" ${model_flags} "--batch N\n" "--seq N\n" "lora\\|full" "flash\\|mem-efficient\\|math"
        "hf-peft\\|libtorch" "first\\|steady" "bf16\\|fp16\\|fp32" "default 2048" "exit status")
vramfit_cli_test(help.max-batch EXIT 0 ARGS max-batch -h
  MATCH "usage: vramfit max-batch .*--budget SIZE" ${model_flags} "--seq N")
vramfit_cli_test(help.max-seq EXIT 0 ARGS max-seq --help
  MATCH "usage: vramfit max-seq .*--budget SIZE" ${model_flags} "--batch N")
vramfit_cli_test(help.sweep EXIT 0 ARGS sweep --help MATCH "usage: vramfit sweep" ${model_flags} "--batch N\\[,N...\\]"
  "--seq N\\[,N...\\]" "JSON lines")
vramfit_cli_test(help.presets EXIT 0 ARGS presets --help MATCH "usage: vramfit presets" "--json")
vramfit_cli_test(help.wins_over_bad_flags EXIT 0 ARGS predict --batch 0 --help MATCH "usage: vramfit predict")

# ---- predict --------------------------------------------------------------------------------
vramfit_cli_test(predict EXIT 0 ARGS predict ${small}
  MATCH "model: +SmolLM2-135M" "stack: +hf-peft" "peak: +[0-9.]+ GB allocated, in the [a-z]"
        "required: +[0-9.]+ GB" "parameters +[0-9.]+" "activations +[0-9.]+" "logits +[0-9.]+" "workspace +[0-9.]+"
        "total +[0-9.]+" "backward\\*")
vramfit_cli_test(predict.json EXIT 0 ARGS predict ${small} --json
  MATCH "^{.*}\n$" "\"peak_bytes\": *${json_number}" "\"required_bytes\": *${json_number}"
        "\"phase\": *\"[a-z_]+\"" "\"phases\": *{" "\"optimizer_step\": *${json_number}" "\"terms\": *\\["
        "\"name\": *\"logits\"" "\"stack\": *\"hf-peft\"" "\"model\": *{" "\"vocab\": *49152" "\"step\": *{"
        "\"seq\": *2048" "\"lora_targets\": *\\[")
vramfit_cli_test(predict.fits EXIT 0 ARGS predict ${small} --budget 24GiB
  MATCH "\nfits the budget of 25.770 GB .*headroom")
vramfit_cli_test(predict.fits.json EXIT 0 ARGS predict ${small} --budget 24GiB --json
  MATCH "\"fits\": *true" "\"budget_bytes\": *25769803776" "\"headroom_bytes\": *${json_number}")
vramfit_cli_test(predict.does_not_fit EXIT 3 ARGS predict --model Qwen2.5-7B --mode full --budget 24GB
  MATCH "\ndoes not fit the budget of 24.000 GB \\(22.35 GiB\\): requires [0-9.]+ GB, [0-9.]+ GB over\n")
vramfit_cli_test(predict.does_not_fit.json EXIT 3 ARGS predict --model Qwen2.5-7B --mode full --budget=24GB --json
  MATCH "\"fits\": *false" "\"shortfall_bytes\": *${json_number}" "\"budget_bytes\": *24000000000")
vramfit_cli_test(predict.every_flag EXIT 0
  ARGS predict --model=smollm2-135m --batch 2 --seq 1024 --mode lora --lora-rank 16 --lora-targets all-linear
       --grad-ckpt --logits-retained --attention math --stack libtorch --phase first --precision fp16 --json
  MATCH "\"batch\": *2" "\"seq\": *1024" "\"lora_rank\": *16" "\"down_proj\""
        "\"gradient_checkpointing\": *true" "\"logits_retained\": *true" "\"attention\": *\"math\""
        "\"stack\": *\"libtorch\"" "\"peak_over\": *\"first\"" "\"precision\": *\"fp16\"" "\"name\": *\"SmolLM2-135M\"")
vramfit_cli_test(predict.full EXIT 0 ARGS predict ${small} --mode full --precision fp32 MATCH "full fine-tuning" "fp32")
vramfit_cli_test(predict.config EXIT 0 ARGS predict --config ${cli_configs}/tiny-llama.json
  MATCH "model: +.*tiny-llama.json: vocab 32000, hidden 2048" "1.10B parameters")
vramfit_cli_test(predict.config.json EXIT 0 ARGS predict --config ${cli_configs}/tiny-llama.json --json
  MATCH "\"config\": *\"[^\"]*tiny-llama.json\"" "\"kv_heads\": *4")

# ---- max-batch and max-seq ------------------------------------------------------------------
vramfit_cli_test(max-batch EXIT 0 ARGS max-batch ${small} --budget 24GiB
  MATCH "budget: +25.770 GB \\(24.00 GiB\\)" "max batch: [1-9][0-9]*\n" "at batch [1-9][0-9]*: peak")
vramfit_cli_test(max-batch.json EXIT 0 ARGS max-batch ${small} --seq 4096 --budget 24GiB --json
  MATCH "\"max_batch\": *[1-9][0-9]*" "\"budget_bytes\": *25769803776" "\"prediction\": *{" "\"seq\": *4096")
vramfit_cli_test(max-batch.nothing_fits EXIT 3 ARGS max-batch --model Qwen2.5-7B --mode full --budget 2GB
  MATCH "max batch: 0: not even batch 1 fits")
vramfit_cli_test(max-batch.nothing_fits.json EXIT 3 ARGS max-batch --model Qwen2.5-7B --mode full --budget 2GB --json
  MATCH "\"max_batch\": *0")
vramfit_cli_test(max-seq EXIT 0 ARGS max-seq ${small} --budget 24GiB MATCH "max seq: [1-9][0-9]*\n")
vramfit_cli_test(max-seq.json EXIT 0 ARGS max-seq ${small} --batch 2 --grad-ckpt --budget 80GB --json
  MATCH "\"max_seq\": *[1-9][0-9]*" "\"batch\": *2" "\"phase\": *\"[a-z_]+\"")

# ---- sweep ----------------------------------------------------------------------------------
vramfit_cli_test(sweep EXIT 0 ARGS sweep ${small} --seq 1024,2048,4096 --batch 1,4
  MATCH "\n +seq +batch +predicted +real +pred/real +verdict +realised\n" "\n *1024 +1 +[0-9.]+ GB\n"
        "\n *4096 +4 +[0-9.]+ GB\n")
vramfit_cli_test(sweep.budget EXIT 3 ARGS sweep ${small} --seq 1024,8192 --budget 8GB
  MATCH "realised +fits\n" "\n *1024 +1 +[0-9.]+ GB +yes\n" "\n *8192 +1 +[0-9.]+ GB +no\n")
vramfit_cli_test(sweep.all_fit EXIT 0 ARGS sweep ${small} --seq 1024,2048 --budget 80GB MATCH "yes\n.*yes\n")
vramfit_cli_test(sweep.json EXIT 0 ARGS sweep ${small} --seq 1024,2048,4096 --batch 1,4 --json LINES 6
  MATCH "^{[^\n]*}\n{" "\"batch\":4,[^\n]*\"seq\":4096" "\"peak_bytes\":${json_number}" "\"phase\":\"[a-z_]+\"")
vramfit_cli_test(sweep.json.budget EXIT 3 ARGS sweep ${small} --seq 1024,8192 --budget 8GB --json LINES 2
  MATCH "\"fits\":true" "\"fits\":false")

# ---- several ranks: --world-size and --sharding (per-rank figures) ---------------------------
vramfit_cli_test(help.sharding EXIT 0 ARGS predict --help
  MATCH "--world-size N\n" "--sharding none\\|zero1\\|zero2\\|full\\|hybrid:K\n")
vramfit_cli_test(help.max-seq.sharding EXIT 0 ARGS max-seq --help MATCH "--world-size N" "--sharding")
vramfit_cli_test(predict.sharding.full EXIT 0 ARGS predict --model Llama-3.1-8B --mode full --world-size 8 --sharding full
    --budget 80GB
  MATCH "step: .*, full sharding over 8 ranks, per rank\n"
        "\nranks: +full sharding over 8 ranks: every figure is per rank \\(rank 0, which holds the largest shard\\)"
        "parameters +[0-9.]+" "\nfits the budget of 80.000 GB")
vramfit_cli_test(predict.sharding.ddp EXIT 0 ARGS predict ${small} --world-size 4
  MATCH "DDP over 4 ranks, per rank\n" "\nranks: +DDP over 4 ranks")
vramfit_cli_test(predict.sharding.json EXIT 0 ARGS predict ${small} --world-size 16 --sharding hybrid:4 --json
  MATCH "\"world_size\": *16" "\"sharding\": *\"hybrid:4\"" "\"peak_bytes\": *${json_number}")
vramfit_cli_test(predict.sharding.default.json EXIT 0 ARGS predict ${small} --json
  MATCH "\"world_size\": *1" "\"sharding\": *\"none\"")
vramfit_cli_test(predict.sharding.full_on_one_rank EXIT 0 ARGS predict ${small} --sharding full --world-size 1
  MATCH "full sharding over 1 rank, per rank")
vramfit_cli_test(predict.sharding.zero2 EXIT 0 ARGS predict --model Qwen2.5-7B --mode full --world-size 8 --sharding=zero2
  MATCH "ZeRO-2 over 8 ranks, per rank")
# Full fine-tuning of an 8B model does not fit one 80 GB card; sharded over 8 it does, with room for a batch.
vramfit_cli_test(predict.sharding.one_card_does_not_fit EXIT 3 ARGS predict --model Llama-3.1-8B --mode full --budget 80GB
  MATCH "does not fit the budget")
vramfit_cli_test(max-batch.sharding EXIT 0 ARGS max-batch --model Llama-3.1-8B --mode full --world-size 8 --sharding full
    --budget 80GB
  MATCH "ranks: +full sharding over 8 ranks" "max batch: [1-9][0-9]*\n")
vramfit_cli_test(max-batch.sharding.json EXIT 0 ARGS max-batch ${small} --world-size 2 --sharding zero1 --budget 24GiB --json
  MATCH "\"max_batch\": *[1-9][0-9]*" "\"world_size\": *2" "\"sharding\": *\"zero1\"")
vramfit_cli_test(max-seq.sharding EXIT 0 ARGS max-seq ${small} --world-size 8 --sharding full --budget 24GiB
  MATCH "full sharding over 8 ranks" "max seq: [1-9][0-9]*\n")
vramfit_cli_test(sweep.sharding EXIT 0 ARGS sweep ${small} --seq 1024,2048 --world-size 4 --sharding full
  MATCH "ranks: +full sharding over 4 ranks" "\n *2048 +1 +[0-9.]+ GB\n")
vramfit_cli_test(sweep.sharding.json EXIT 0 ARGS sweep ${small} --seq 1024,2048 --world-size 4 --sharding hybrid:2 --json
    LINES 2
  MATCH "\"sharding\":\"hybrid:2\",\"world_size\":4")
vramfit_cli_error(world_size_zero --world-size predict ${small} --world-size 0)
vramfit_cli_error(world_size_beyond_limit --world-size predict ${small} --world-size 65537)
vramfit_cli_error(world_size_not_a_number --world-size predict ${small} --world-size eight)
vramfit_cli_error(sharding_unknown --sharding predict ${small} --sharding zero3)
vramfit_cli_error(sharding_hybrid_zero --sharding predict ${small} --world-size 4 --sharding hybrid:0)
vramfit_cli_error(sharding_hybrid_not_dividing --sharding predict ${small} --world-size 4 --sharding hybrid:3)
vramfit_cli_error(sharding_hybrid_larger_than_world --sharding max-batch ${small} --world-size 4 --sharding hybrid:8
  --budget 24GB)
vramfit_cli_error(sharding_hybrid_not_a_number --sharding predict ${small} --world-size 4 --sharding hybrid:x)
vramfit_cli_error(sharding_hybrid_without_group --sharding predict ${small} --world-size 4 --sharding hybrid)
vramfit_cli_error(sharding_empty --sharding predict ${small} --sharding=)
vramfit_cli_error(sharding_not_in_probe --world-size presets --world-size 2)
if(TARGET vramfit::probe)
  vramfit_cli_error(probe_takes_no_world_size --world-size probe ${small} --world-size 2)
  vramfit_cli_error(probe_takes_no_sharding --sharding probe ${small} --sharding full)
endif()

# ---- presets --------------------------------------------------------------------------------
vramfit_cli_test(presets EXIT 0 ARGS presets
  MATCH "model +parameters +vocab" "\nSmolLM2-135M +134.5M +49152 +576" "Llama-3.1-8B +8.03B" "TinyLlama-1.1B")
vramfit_cli_test(presets.json EXIT 0 ARGS presets --json
  MATCH "\"presets\": *\\[" "\"name\": *\"Qwen2.5-7B\"" "\"parameters\": *134515008")

# ---- bad input: exit 2, one line on stderr naming the flag -----------------------------------
vramfit_cli_error(unknown_subcommand subcommand frobnicate)
vramfit_cli_error(unknown_top_level_option --frob --frob)
vramfit_cli_error(unknown_flag --frob predict ${small} --frob)
vramfit_cli_error(single_dash_flag -b predict ${small} -b 2)
vramfit_cli_error(stray_argument stray predict ${small} stray)
vramfit_cli_error(flag_of_another_command --model presets --model SmolLM2-135M)
vramfit_cli_error(missing_value_at_end --seq predict ${small} --seq)
vramfit_cli_error(missing_value_before_flag --seq predict --seq --model SmolLM2-135M)
vramfit_cli_error(empty_value --batch predict ${small} --batch=)
vramfit_cli_error(given_twice --batch predict ${small} --batch 1 --batch 2)
vramfit_cli_error(switch_given_twice --grad-ckpt predict ${small} --grad-ckpt --grad-ckpt)
vramfit_cli_error(switch_with_value --json predict ${small} --json=yes)
vramfit_cli_error(batch_zero --batch predict ${small} --batch 0)
vramfit_cli_error(batch_negative --batch predict ${small} --batch -1)
vramfit_cli_error(batch_plus_sign --batch predict ${small} --batch +1)
vramfit_cli_error(batch_leading_space --batch predict ${small} "--batch= 1")
vramfit_cli_error(batch_trailing_junk --batch predict ${small} --batch 4x)
vramfit_cli_error(batch_fraction --batch predict ${small} --batch 1.5)
vramfit_cli_error(batch_beyond_64_bits --batch predict ${small} --batch 99999999999999999999999)
vramfit_cli_error(batch_beyond_limit --batch predict ${small} --batch 2000000)
vramfit_cli_error(seq_beyond_limit --seq predict ${small} --seq 20000000)
vramfit_cli_error(seq_list_in_predict --seq predict ${small} --seq 1024,2048)
vramfit_cli_error(step_overflows --seq predict ${small} --batch 1048576 --seq 16777216)
vramfit_cli_error(no_model --model predict --seq 1024)
vramfit_cli_error(model_and_config --config predict ${small} --config ${cli_configs}/tiny-llama.json)
vramfit_cli_error(unknown_model --model predict --model GPT-5)
vramfit_cli_error(config_unreadable --config predict --config ${cli_configs}/absent.json)
vramfit_cli_error(config_directory --config predict --config ${cli_configs})
vramfit_cli_error(config_bad_field hidden_size predict --config ${cli_configs}/string-hidden-size.json)
vramfit_cli_error(config_malformed "malformed JSON" predict --config ${cli_configs}/malformed.json)
vramfit_cli_error(lora_rank_with_full --lora-rank predict ${small} --mode full --lora-rank 8)
vramfit_cli_error(lora_targets_with_full --lora-targets predict ${small} --lora-targets all-linear --mode full)
vramfit_cli_error(lora_rank_zero --lora-rank predict ${small} --lora-rank 0)
vramfit_cli_error(lora_rank_beyond_limit --lora-rank predict ${small} --lora-rank 100000)
vramfit_cli_error(lora_targets_unknown --lora-targets predict ${small} --lora-targets q_proj,x_proj)
vramfit_cli_error(lora_targets_empty_item --lora-targets predict ${small} --lora-targets q_proj,,v_proj)
vramfit_cli_error(mode_unknown --mode predict ${small} --mode half)
vramfit_cli_error(attention_unknown --attention predict ${small} --attention slow)
vramfit_cli_error(stack_unknown --stack predict ${small} --stack jax)
vramfit_cli_error(phase_unknown --phase predict ${small} --phase last)
vramfit_cli_error(precision_unknown --precision predict ${small} --precision int8)
vramfit_cli_error(budget_zero --budget predict ${small} --budget 0GB)
vramfit_cli_error(budget_negative --budget predict ${small} --budget -1GB)
vramfit_cli_error(budget_unknown_unit --budget predict ${small} --budget 24XB)
vramfit_cli_error(budget_beyond_64_bits --budget predict ${small} --budget 99999999TB)
vramfit_cli_error(max-batch_needs_budget --budget max-batch ${small})
vramfit_cli_error(max-seq_needs_budget --budget max-seq ${small} --batch 2)
vramfit_cli_error(max-batch_takes_no_batch --batch max-batch ${small} --batch 2 --budget 24GB)
vramfit_cli_error(max-seq_takes_no_seq --seq max-seq ${small} --seq 2 --budget 24GB)
vramfit_cli_error(sweep_empty_item --seq sweep ${small} --seq 1024,,2048)
vramfit_cli_error(sweep_trailing_comma --batch sweep ${small} --batch 1,4,)
vramfit_cli_error(sweep_bad_item --seq sweep ${small} --seq 1024,two)
vramfit_cli_error(sweep_item_beyond_limit --batch sweep ${small} --batch 1,2000000)
if(NOT TARGET vramfit::probe)
  vramfit_cli_error(probe_not_built probe probe ${small})
endif()

# replay: the measurements file is required and must be readable.
vramfit_cli_test(help.replay EXIT 0 ARGS replay --help MATCH "usage: vramfit replay" "--data")
vramfit_cli_error(replay_without_data --data replay)
vramfit_cli_error(replay_missing_file measurements replay --data /nonexistent/steps.jsonl)
vramfit_cli_error(replay_bad_stack --stack replay --data /nonexistent/steps.jsonl --stack tensorflow)
# replay --trace: a recorded allocator trace through the caching-allocator model, exact to the byte.
set(trace_dir ${CMAKE_CURRENT_SOURCE_DIR}/../tests/data/traces)
vramfit_cli_test(replay_trace EXIT 0 ARGS replay --trace ${trace_dir}/smollm2-135m-lora-r16-all-s1024.jsonl
  MATCH "measured +2.199 GB +2.148 GB +51.4 MB" "allocator model +2.199 GB +2.148 GB +51.4 MB" "exactly")
vramfit_cli_test(replay_trace_json EXIT 0 ARGS replay --json --trace ${trace_dir}/qwen2.5-0.5b-lora-r8-attn-gc-s1024.jsonl
  MATCH "\"peak_allocated_bytes\":2995068928,\"peak_requested_bytes\":2985238536,\"reserved" "\"exact\":true")
vramfit_cli_error(replay_trace_and_data --trace replay --trace ${trace_dir}/x.jsonl --data /nonexistent/steps.jsonl)
vramfit_cli_error(replay_trace_with_stack --stack replay --trace ${trace_dir}/x.jsonl --stack libtorch)
vramfit_cli_error(replay_trace_missing_file trace replay --trace /nonexistent/trace.jsonl)
vramfit_cli_error(replay_trace_not_a_trace trace replay --trace ${CMAKE_CURRENT_SOURCE_DIR}/../tests/data/hf_steps.jsonl)

# The exact path: a LoRA step of a recorded kind is simulated from its step program; other steps
# say why not and keep the closed form.
vramfit_cli_test(predict_simulated EXIT 0 ARGS predict ${small} --seq 1024 --lora-targets q_proj,k_proj,v_proj,o_proj
  MATCH "allocator simulation of the recorded HF \\+ PEFT step \\([0-9]+ requests\\): peak [0-9.]+ [GM]B in the backward")
vramfit_cli_test(predict_simulated_json EXIT 0 ARGS predict ${small} --seq 1024 --lora-targets all-linear --json
  MATCH "\"method\": \"allocator simulation\"" "\"available\": true" "\"closed_form\": {\n *\"peak_bytes\": ${json_number}")
vramfit_cli_test(predict_full_simulated EXIT 0 ARGS predict ${small} --mode full --seq 1024
  MATCH "allocator simulation of the recorded HF . PEFT step")
vramfit_cli_test(predict_batch_not_simulated EXIT 0 ARGS predict ${small} --mode full --seq 1024 --batch 32
  MATCH "no allocator simulation: outside the range the programs are used in")
vramfit_cli_test(predict_libtorch_json EXIT 0 ARGS predict ${small} --stack libtorch --json
  MATCH "\"method\": \"allocator simulation\"" "\"available\": true")
vramfit_cli_test(predict_libtorch_fp32_closed_form EXIT 0 ARGS predict ${small} --stack libtorch --precision fp32
  --attention math MATCH "no allocator simulation: recorded in bf16 only")
vramfit_cli_test(sweep_simulated_json EXIT 0 ARGS sweep ${small} --seq 1024,2048 --lora-targets q_proj,v_proj --json
  MATCH "\"method\":\"allocator simulation\"")
vramfit_cli_test(predict_outside_program_range EXIT 0 ARGS predict ${small} --seq 100
  MATCH "no allocator simulation: outside the range the programs are used in")
