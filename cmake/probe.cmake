# The optional LibTorch probe (include/vramfit/probe.hpp): an INTERFACE target `vramfit_probe`,
# alias `vramfit::probe`, made only when Torch is found, so the core never requires it.
#
# Included by the top-level CMakeLists after `vramfit::vramfit` exists. Sets VRAMFIT_HAS_PROBE
# (ON or OFF) in the including scope, and in the parent directory's scope when there is one, and
# adds `probe` to vramfit_components (what is installed and exported).
# Torch comes from CMAKE_PREFIX_PATH, e.g.
#   -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"

set(VRAMFIT_HAS_PROBE OFF)

# The probe uses the 2.8+ API (SDPA with enable_gqa, the fused at::rms_norm with its own backward,
# the device-generic allocator statistics) and runs on CUDA only: a CPU-only or older LibTorch
# (Debian's libtorch-dev is 1.13, CPU) is skipped, not built.
set(VRAMFIT_PROBE_MIN_TORCH 2.8)

find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(STATUS "skipping the probe: Torch not found")
elseif(Torch_VERSION VERSION_LESS VRAMFIT_PROBE_MIN_TORCH)
  message(STATUS "skipping the probe: Torch ${Torch_VERSION} found, ${VRAMFIT_PROBE_MIN_TORCH} or newer needed")
elseif(NOT TARGET c10_cuda AND NOT TORCH_CUDA_LIBRARIES)
  message(STATUS "skipping the probe: Torch ${Torch_VERSION} was built without CUDA")
else()
  if(NOT TARGET nlohmann_json::nlohmann_json)
    find_package(nlohmann_json 3 QUIET)
  endif()
  if(NOT TARGET nlohmann_json::nlohmann_json)
    message(STATUS "skipping the probe: nlohmann_json not found")
  else()
    add_library(vramfit_probe INTERFACE)
    add_library(vramfit::probe ALIAS vramfit_probe)
    set_target_properties(vramfit_probe PROPERTIES EXPORT_NAME probe)  # installed as vramfit::probe
    target_link_libraries(vramfit_probe INTERFACE vramfit nlohmann_json::nlohmann_json)
    target_compile_features(vramfit_probe INTERFACE cxx_std_20)
    # TORCH_LIBRARIES holds absolute paths of this machine (c10, the CUDA libraries): only the
    # build tree links them from here. The installed vramfit::probe gets the consumer's own
    # TORCH_LIBRARIES and TORCH_CXX_FLAGS from vramfitConfig.cmake, after its find_dependency(Torch).
    foreach(_vramfit_lib IN LISTS TORCH_LIBRARIES)
      target_link_libraries(vramfit_probe INTERFACE $<BUILD_INTERFACE:${_vramfit_lib}>)
    endforeach()
    unset(_vramfit_lib)
    # TorchConfig puts TORCH_CXX_FLAGS (-D_GLIBCXX_USE_CXX11_ABI=0|1) on the `torch` target's
    # INTERFACE_COMPILE_OPTIONS; repeat them here so that a consumer that links only this target
    # still builds with the ABI the libraries were built with.
    if(TORCH_CXX_FLAGS)
      separate_arguments(_vramfit_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
      foreach(_vramfit_flag IN LISTS _vramfit_torch_flags)
        target_compile_options(vramfit_probe INTERFACE $<BUILD_INTERFACE:${_vramfit_flag}>)
      endforeach()
      unset(_vramfit_flag)
      unset(_vramfit_torch_flags)
    endif()
    # The installed `vramfit` executable links LibTorch's shared libraries: keep their directory
    # in its install RPATH, as the build tree's has it.
    if(NOT DEFINED CMAKE_INSTALL_RPATH_USE_LINK_PATH)
      set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
    endif()
    list(APPEND vramfit_components probe)
    set(VRAMFIT_HAS_PROBE ON)
    message(STATUS "vramfit probe: Torch ${Torch_VERSION} found, target vramfit::probe")
  endif()
endif()

get_directory_property(_vramfit_parent PARENT_DIRECTORY)
if(_vramfit_parent)
  set(VRAMFIT_HAS_PROBE ${VRAMFIT_HAS_PROBE} PARENT_SCOPE)
endif()
unset(_vramfit_parent)
