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
  foreach(_amx GGML_AMX_TILE GGML_AMX_INT8 GGML_AMX_BF16)
    set(${_amx} OFF CACHE BOOL "" FORCE)
  endforeach()
  add_subdirectory("${SPECDEC_LLAMA_CPP_DIR}" "${PROJECT_BINARY_DIR}/llama.cpp" EXCLUDE_FROM_ALL SYSTEM)
  specdec_llama_cpp_without_amx()
endfunction()

# ggml-cpu is built with -march=native (its fast paths: the repacked Q4_0 kernels, AVX-512 where the
# CPU has it), and on a CPU with AMX that defines __AMX_INT8__, which puts the weights into ggml's AMX
# buffer type, whose matmul segfaults in this pin (ggml-org/llama.cpp#20824). The AMX instruction sets
# are switched off by flag, after -march=native, on every x86 machine: the compiler then never
# defines the macros, ggml compiles its AMX path out, and the binary is the same whether or not the
# building CPU has AMX. (GCC and Clang both let an explicit -mno-<isa> win over -march, in any order;
# the flags this compiler does not know name instruction sets it cannot emit either.)
# scripts/check_llama_cpp.sh checks the result: ggml-cpu's compile command, with an AMX CPU's -march,
# defines no AMX macro; no AMX instruction in the programs; no AMX buffer type at run time.
function(specdec_llama_cpp_without_amx)
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i[3-6]86|x86)$" OR NOT TARGET ggml-cpu)
    return()
  endif()
  include(CheckCCompilerFlag)
  include(CheckCXXCompilerFlag)
  set(_flags "")
  foreach(_isa amx-tile amx-int8 amx-bf16 amx-fp16 amx-complex amx-avx512 amx-tf32 amx-fp8 amx-movrs amx-transpose)
    string(MAKE_C_IDENTIFIER "SPECDEC_HAS_MNO_${_isa}" _c)
    check_c_compiler_flag("-mno-${_isa}" ${_c}_C)
    check_cxx_compiler_flag("-mno-${_isa}" ${_c}_CXX)
    if(${_c}_C)
      list(APPEND _flags "$<$<COMPILE_LANGUAGE:C>:-mno-${_isa}>")
    endif()
    if(${_c}_CXX)
      list(APPEND _flags "$<$<COMPILE_LANGUAGE:CXX>:-mno-${_isa}>")
    endif()
  endforeach()
  if(NOT SPECDEC_HAS_MNO_amx_tile_C OR NOT SPECDEC_HAS_MNO_amx_tile_CXX)
    message(FATAL_ERROR "the compilers do not take -mno-amx-tile: llama.cpp cannot be built without its AMX path "
                        "(C: ${CMAKE_C_COMPILER}, C++: ${CMAKE_CXX_COMPILER})")
  endif()
  target_compile_options(ggml-cpu PRIVATE ${_flags})
endfunction()
