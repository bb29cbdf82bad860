# patchspec_add_model(): build a patched ONNX model from a reviewed spec, as a CMake target.
#
#   list(APPEND CMAKE_MODULE_PATH "${PATCHSPEC_CMAKE_DIR}")   # from: patchspec cmake-path
#   include(Patchspec)
#   patchspec_add_model(detector_b32
#     SPEC   specs/scrfd_b32.yaml          # relative to CMAKE_CURRENT_SOURCE_DIR
#     OUTPUT models/scrfd_b32.onnx         # relative to CMAKE_CURRENT_BINARY_DIR
#     DATA   models/scrfd_b32.onnx.data    # the output's external data file(s), if it has any
#     [MODEL  path/to/input.onnx]          # instead of the spec's model
#     [PATCHSPEC /path/to/patchspec])      # default: found on PATH
#
# The rule reruns when the spec, the input model, its data files or a file a verifier reads
# changes (patchspec writes a depfile), and when an output or data file is deleted. Needs
# CMake >= 3.20 (DEPFILE with every generator).

function(patchspec_add_model target)
  cmake_parse_arguments(PS "" "SPEC;OUTPUT;MODEL;PATCHSPEC" "DATA" ${ARGN})
  if(NOT PS_SPEC OR NOT PS_OUTPUT)
    message(FATAL_ERROR "patchspec_add_model(${target}): give SPEC and OUTPUT")
  endif()
  if(NOT PS_PATCHSPEC)
    find_program(PATCHSPEC_EXECUTABLE patchspec REQUIRED)
    set(PS_PATCHSPEC "${PATCHSPEC_EXECUTABLE}")
  endif()
  get_filename_component(spec "${PS_SPEC}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  get_filename_component(output "${PS_OUTPUT}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  set(outputs "${output}")
  foreach(data IN LISTS PS_DATA)
    get_filename_component(data "${data}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
    list(APPEND outputs "${data}")
  endforeach()
  set(arguments -q apply "${spec}" --output "${output}" --depfile "${output}.d")
  if(PS_MODEL)
    get_filename_component(model "${PS_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND arguments --model "${model}")
  endif()
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND "${PS_PATCHSPEC}" ${arguments}
    DEPENDS "${spec}"
    DEPFILE "${output}.d"
    COMMENT "patchspec ${PS_SPEC}"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${outputs})
endfunction()
