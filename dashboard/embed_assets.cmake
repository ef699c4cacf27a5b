# Writes OUT: a C++ file with each of ASSETS ('|'-separated paths) as a raw
# string literal (tutti::dashboard::asset_NAME, NAME the file name with '.'
# as '_').
string(REPLACE "|" ";" ASSETS "${ASSETS}")
set(text "// Generated from dashboard/assets by embed_assets.cmake.\n")
string(APPEND text "namespace tutti::dashboard {\n")
foreach(asset IN LISTS ASSETS)
  get_filename_component(name "${asset}" NAME)
  string(REPLACE "." "_" name "${name}")
  file(READ "${asset}" content)
  string(FIND "${content}" ")asset\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${asset} holds the delimiter )asset\"")
  endif()
  string(APPEND text "extern const char* const asset_${name};\n"
    "const char* const asset_${name} = R\"asset(${content})asset\";\n")
endforeach()
string(APPEND text "} // namespace tutti::dashboard\n")
file(WRITE "${OUT}.tmp" "${text}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
