# llama.cpp for examples/llama_cpp (off unless SPECDEC_BUILD_LLAMA_CPP): the pinned source tree
# (cmake/llama_cpp.pin; scripts/fetch_llama_cpp.sh fetches it into the cache when
# SPECDEC_LLAMA_CPP_DIR is not given), built as static libllama + ggml's CPU backend, inside this
# build. With SPECDEC_BUILD_LLAMA_CPP_TOOLS llama.cpp's own programs (llama-lookup,
# llama-speculative-simple, llama-completion, llama-quantize, ...) become targets of this build too, from
# the same source and flags, for scripts/compare_llama_cpp.sh; they are excluded from `all` either way.
# The library itself never depends on llama.cpp.
function(specdec_add_llama_cpp)
  file(STRINGS "${PROJECT_SOURCE_DIR}/cmake/llama_cpp.pin" _pin REGEX "^LLAMA_CPP_COMMIT=")
  string(REPLACE "LLAMA_CPP_COMMIT=" "" _commit "${_pin}")
  if(NOT SPECDEC_LLAMA_CPP_DIR)
    execute_process(COMMAND "${PROJECT_SOURCE_DIR}/scripts/fetch_llama_cpp.sh"
                    OUTPUT_VARIABLE _dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _status)
    if(NOT _status EQUAL 0)
      message(FATAL_ERROR "scripts/fetch_llama_cpp.sh failed (${_status}); set SPECDEC_LLAMA_CPP_DIR to a llama.cpp tree at ${_commit}")
    endif()
    set(SPECDEC_LLAMA_CPP_DIR "${_dir}" CACHE PATH "llama.cpp source tree (pinned in cmake/llama_cpp.pin)" FORCE)
  endif()
  if(NOT EXISTS "${SPECDEC_LLAMA_CPP_DIR}/include/llama.h")
    message(FATAL_ERROR "SPECDEC_LLAMA_CPP_DIR=${SPECDEC_LLAMA_CPP_DIR} is not a llama.cpp source tree")
  endif()
  message(STATUS "specdec: llama.cpp from ${SPECDEC_LLAMA_CPP_DIR} (pinned commit ${_commit})")
  set(BUILD_SHARED_LIBS OFF)
  foreach(_off LLAMA_BUILD_TESTS LLAMA_BUILD_SERVER LLAMA_OPENSSL LLAMA_CURL)
    set(${_off} OFF CACHE BOOL "" FORCE)
  endforeach()
  foreach(_tools LLAMA_BUILD_COMMON LLAMA_BUILD_TOOLS LLAMA_BUILD_EXAMPLES)
    set(${_tools} ${SPECDEC_BUILD_LLAMA_CPP_TOOLS} CACHE BOOL "" FORCE)
  endforeach()
  set(GGML_NATIVE ON CACHE BOOL "" FORCE)
  set(GGML_CCACHE OFF CACHE BOOL "" FORCE)
  add_subdirectory("${SPECDEC_LLAMA_CPP_DIR}" "${PROJECT_BINARY_DIR}/llama.cpp" EXCLUDE_FROM_ALL SYSTEM)
endfunction()
