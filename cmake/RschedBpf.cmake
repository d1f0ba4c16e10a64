# rsched_add_bpf_skeleton(<target> SOURCE <file.bpf.c> [INCLUDES dirs...] [DEPENDS files...])
#
# Compiles a BPF C file with clang, strips it with `bpftool gen object` (drops DWARF, keeps BTF)
# and generates the libbpf skeleton header <stem>.skel.h at build time. The result is an INTERFACE
# target whose include directory holds the skeleton; it links libbpf.
# clang >= 15: the dirty list's task references need BTF type tags (`__kptr`), which clang 14
# does not emit. With an older clang the build still works and rschedd falls back to the task
# iterator at run time.
find_program(RSCHED_CLANG NAMES clang-15 clang-16 clang-17 clang clang-14 REQUIRED)
find_program(RSCHED_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)
execute_process(COMMAND ${RSCHED_BPFTOOL} version OUTPUT_VARIABLE _bpftool_version
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
string(REGEX MATCH "v[0-9.]+" _bpftool_v "${_bpftool_version}")
message(STATUS "BPF toolchain: ${RSCHED_CLANG}, ${RSCHED_BPFTOOL} ${_bpftool_v}")
execute_process(COMMAND ${RSCHED_CLANG} --version OUTPUT_VARIABLE _clang_version ERROR_QUIET)
string(REGEX MATCH "version ([0-9]+)" _clang_v "${_clang_version}")
if(CMAKE_MATCH_1 AND CMAKE_MATCH_1 LESS 15)
  message(WARNING "${RSCHED_CLANG} is clang ${CMAKE_MATCH_1}: it emits no BTF type tags, so "
                  "rschedd will read live threads with the task iterator instead of the dirty "
                  "list (install clang-15)")
endif()

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|amd64")
  set(RSCHED_BPF_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(RSCHED_BPF_ARCH arm64)
else()
  message(FATAL_ERROR "unsupported architecture for BPF: ${CMAKE_SYSTEM_PROCESSOR}")
endif()

function(rsched_add_bpf_skeleton target)
  cmake_parse_arguments(ARG "" "SOURCE" "INCLUDES;DEPENDS" ${ARGN})
  get_filename_component(_stem ${ARG_SOURCE} NAME_WE) # rsched.bpf.c -> rsched
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/bpf)
  set(_obj ${_dir}/${_stem}.bpf.o)
  set(_stripped ${_dir}/${_stem}.stripped.bpf.o)
  set(_skel ${_dir}/${_stem}.skel.h)
  set(_werror)
  if(RSCHED_WERROR)
    set(_werror -Werror)
  endif()
  set(_incflags)
  foreach(_inc ${ARG_INCLUDES})
    list(APPEND _incflags -I${_inc})
  endforeach()
  add_custom_command(
    OUTPUT ${_skel}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_dir}
    COMMAND ${RSCHED_CLANG} -g -O2 -target bpf -mcpu=v3 -D__TARGET_ARCH_${RSCHED_BPF_ARCH} -Wall ${_werror}
            ${_incflags} -c ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SOURCE} -o ${_obj}
    COMMAND ${RSCHED_BPFTOOL} gen object ${_stripped} ${_obj}
    COMMAND ${RSCHED_BPFTOOL} gen skeleton ${_stripped} name ${_stem}_bpf > ${_skel}
    DEPENDS ${ARG_SOURCE} ${ARG_DEPENDS}
    COMMENT "BPF: compiling ${ARG_SOURCE} and generating ${_stem}.skel.h"
    VERBATIM)
  add_custom_target(${target}_gen DEPENDS ${_skel})
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_gen)
  # SYSTEM: the generated skeleton is C-style code we do not hold to our warning flags.
  target_include_directories(${target} SYSTEM INTERFACE ${_dir})
  target_link_libraries(${target} INTERFACE PkgConfig::LIBBPF)
endfunction()
