# SPDX-License-Identifier: BSD-3-Clause
# Run after Doxygen's man output (cmake -DSX_MAN3_DIR=... -P this file).
# MAN_LINKS writes a one-line page (".so man3/<page>") for every member of
# every struct as well: index.3, name.3, flags.3, size.3, ... Installed
# into a shared man3 those would shadow other libraries' pages (the C
# library's index(3)) with ours, so only the API's own names stay: the
# header's page shardx.h.3, and the pages of sx_* and SX_* names
# (functions, types, enumerators, macros). shardx.3 is added, sourcing
# the header's page, so that `man 3 shardx` finds it too.
if(NOT SX_MAN3_DIR OR NOT EXISTS "${SX_MAN3_DIR}/shardx.h.3")
  message(FATAL_ERROR "no Doxygen man page shardx.h.3 in '${SX_MAN3_DIR}'")
endif()
file(GLOB sx_pages "${SX_MAN3_DIR}/*.3")
foreach(page IN LISTS sx_pages)
  get_filename_component(name "${page}" NAME)
  if(NOT name MATCHES "^(sx|SX)_" AND NOT name STREQUAL "shardx.h.3")
    file(REMOVE "${page}")
  endif()
endforeach()
file(WRITE "${SX_MAN3_DIR}/shardx.3" ".so man3/shardx.h.3\n")
