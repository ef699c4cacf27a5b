# tutti_header_check: every public header compiles on its own.
#
# For each PART/include/tutti/**/*.hpp a one-line .cpp that includes only
# that header (twice, so a missing include guard shows too) is compiled
# with exactly what a user of the part sees: the part library's interface
# include directories and definitions, transitively (tutti_PART). A header
# that leans on something its own includes do not bring in fails here
# instead of in whichever file happens to include it first.
#
# Parts are found by globbing the source tree, so a new part is checked as
# soon as it has PART/include/tutti/ and a library named tutti_PART.
# Headers that include CUDA or NCCL headers are checked only where the CUDA
# backend is built (TUTTI_WITH_CUDA); kernels/src/cuda is not public.

file(GLOB tutti_header_check_parts LIST_DIRECTORIES true
  "${PROJECT_SOURCE_DIR}/*/include/tutti")

set(tutti_header_check_sources "")
foreach(include_dir IN LISTS tutti_header_check_parts)
  get_filename_component(part_dir "${include_dir}/../.." ABSOLUTE)
  get_filename_component(part "${part_dir}" NAME)
  if(part_dir STREQUAL PROJECT_BINARY_DIR)
    continue()
  endif()
  if(NOT TARGET tutti_${part})
    message(WARNING "header check: ${part}/include/tutti has public headers "
      "but there is no library tutti_${part}; its headers are not checked")
    continue()
  endif()

  file(GLOB_RECURSE headers CONFIGURE_DEPENDS
    RELATIVE "${part_dir}/include" "${part_dir}/include/tutti/*.hpp")
  foreach(header IN LISTS headers)
    file(STRINGS "${part_dir}/include/${header}" device_includes
      REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](cuda|cublas|nccl)")
    if(device_includes AND NOT TUTTI_WITH_CUDA)
      continue()
    endif()
    string(REGEX REPLACE "[/.]" "_" stem "${header}")
    set(source "${PROJECT_BINARY_DIR}/header_check/${stem}.cpp")
    # Written only when the text changes, so a reconfigure rebuilds nothing.
    file(CONFIGURE OUTPUT "${source}"
      CONTENT "#include <${header}>\n#include <${header}>\n")
    set_source_files_properties("${source}" PROPERTIES
      INCLUDE_DIRECTORIES
        "$<TARGET_PROPERTY:tutti_${part},INTERFACE_INCLUDE_DIRECTORIES>"
      COMPILE_DEFINITIONS
        "$<TARGET_PROPERTY:tutti_${part},INTERFACE_COMPILE_DEFINITIONS>")
    list(APPEND tutti_header_check_sources "${source}")
  endforeach()
endforeach()

# Drop the files of headers that have gone (renamed, moved, deleted).
file(GLOB tutti_header_check_stale "${PROJECT_BINARY_DIR}/header_check/*.cpp")
if(tutti_header_check_sources)
  list(REMOVE_ITEM tutti_header_check_stale ${tutti_header_check_sources})
endif()
if(tutti_header_check_stale)
  file(REMOVE ${tutti_header_check_stale})
endif()

add_library(tutti_header_check OBJECT ${tutti_header_check_sources})
list(LENGTH tutti_header_check_sources tutti_header_check_count)
message(STATUS "tutti: header check covers ${tutti_header_check_count} public headers")
