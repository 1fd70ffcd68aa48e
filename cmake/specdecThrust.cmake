# Locates Thrust's headers: the CUDA toolkit's CCCL when present (Thrust 2.x/3.x), else Debian's
# libthrust-dev (1.17). Sets SPECDEC_THRUST_INCLUDE_DIR (empty when Thrust is not available).
function(specdec_find_thrust)
  if(DEFINED SPECDEC_THRUST_INCLUDE_DIR)
    return()
  endif()
  find_path(_thrust_dir thrust/version.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS}
    PATHS /usr/local/cuda/include/cccl /usr/local/cuda/include /usr/include
    NO_DEFAULT_PATH)
  if(_thrust_dir)
    set(SPECDEC_THRUST_INCLUDE_DIR "${_thrust_dir}" CACHE PATH "Directory holding thrust/ (and cub/, cuda/)")
    message(STATUS "specdec: Thrust headers in ${_thrust_dir}")
  else()
    set(SPECDEC_THRUST_INCLUDE_DIR "" CACHE PATH "Directory holding thrust/ (and cub/, cuda/)")
    message(STATUS "specdec: Thrust not found; specdec::thrust needs it on the include path")
  endif()
endfunction()
