# The layer order, checked: core -> text -> async -> net -> proto -> ops -> kv -> model -> serve.
# A layer may import (and include headers of) only itself and the layers to its left.
# A client-only layer (text: the client's tokenizers) is imported by no other
# layer at all, only by the umbrella module (and programs outside the library).
# Scans modules/, src/ and net/ under ROOT for
#   [export] import mpcache.X;   [export] module mpcache.X[:part];
#   #include "..." / <...>      (resolved against the file's folder, then modules/)
# and fails naming file:line and the offending edge.
#   cmake -DROOT=<source tree> -P check_layers.cmake      (ROOT: default ../..)
#
# Where a file belongs: modules/<layer>/ and src/<layer>/ hold that layer,
# net/ (and net/sys/) is the implementation of mpcache.net, and the few
# shared files at the top of modules/ are placed by `places` below. A
# header under src/<layer>/ or net/ is private to its layer: no other layer
# includes it (a lower one would point up; a higher one should import the
# module instead). A module or file this script cannot place is an error too:
# add it to `layers`, `places` or `foundation_modules` here.
#
# What it does not see: an import written mid-line or produced by a macro
# (neither is valid for module imports), includes through macros. Lines in
# block comments and #if 0 are checked like code (a false alarm, never a
# miss).
cmake_minimum_required(VERSION 3.28)

set(layers core text async net proto ops kv model serve)
# Layers that no other layer imports or includes from (placed in `layers`
# for what they themselves may use): text sits on core and is the client's.
set(client_only_layers text)
# Files (or folders, ending in /) placed by hand, and the rank they sit at:
# `base` below core (may use nothing of ours), a layer's name, or `top` (the
# umbrella, which may import every layer). First match wins.
set(places
  "modules/prelude.hpp=base"    # the std headers, for every unit
  "modules/std/=base"           # mpcache.std: the one unit that parses prelude.hpp
  "modules/backends.hpp=proto"  # names proto's backend types (Rss3, Add2, ...)
  "modules/mpcache.cppm=top"    # export module mpcache: re-exports all layers
  "src/jobs/=top"               # mpcache-jobs: jobs bench and tools share; imports the umbrella
  "src/python/=top")            # the Python package: links mpcache-jobs, imports the umbrella
# Modules of ours that every layer may import: mpcache.std wraps the standard
# library (modules/std/std.cppm).
set(foundation_modules std)

if(NOT DEFINED ROOT OR ROOT STREQUAL "")
  get_filename_component(ROOT "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)

list(JOIN layers " -> " order)
list(LENGTH layers top_rank)

# rank_of(name out): the rank of a layer name, `base` (-1) or `top`; "" if unknown.
function(rank_of name out)
  if(name STREQUAL "base")
    set(r -1)
  elseif(name STREQUAL "top")
    set(r ${top_rank})
  else()
    list(FIND layers "${name}" r)
    if(r EQUAL -1)
      set(r "")
    endif()
  endif()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# place(rel out_layer out_private): the layer a file under ROOT belongs to
# ("" if none), and whether it is private to that layer (src/ and net/).
function(place rel out_layer out_private)
  set(layer "")
  set(private FALSE)
  foreach(entry IN LISTS places)
    string(REPLACE "=" ";" pair "${entry}")
    list(GET pair 0 path)
    list(GET pair 1 where)
    string(FIND "${rel}" "${path}" at)
    if(layer STREQUAL "" AND (rel STREQUAL path OR (path MATCHES "/$" AND at EQUAL 0)))
      set(layer "${where}")
    endif()
  endforeach()
  if(layer STREQUAL "")
    if(rel MATCHES "^net/")
      set(layer net)
      set(private TRUE)
    elseif(rel MATCHES "^(modules|src)/([^/]+)/")
      list(FIND layers "${CMAKE_MATCH_2}" i)
      if(NOT i EQUAL -1)
        set(layer "${CMAKE_MATCH_2}")
      endif()
      if(CMAKE_MATCH_1 STREQUAL "src")
        set(private TRUE)
      endif()
    endif()
  endif()
  set(${out_layer} "${layer}" PARENT_SCOPE)
  set(${out_private} ${private} PARENT_SCOPE)
endfunction()

# module_layer(name out): mpcache -> top, mpcache.X[.Y...] -> X, another
# module (mpcachex, std) -> "-".
function(module_layer name out)
  if(name STREQUAL "mpcache")
    set(r top)
  elseif(name MATCHES "^mpcache[.]([A-Za-z0-9_]+)")
    set(r "${CMAKE_MATCH_1}")
  else()
    set(r "-")
  endif()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# what_may(layer out): "core, async" -- the layers left of a layer but the
# client-only ones, for messages.
function(what_may layer out)
  rank_of("${layer}" r)
  set(allowed)
  foreach(l IN LISTS layers)
    rank_of("${l}" lr)
    if(lr LESS r AND NOT l IN_LIST client_only_layers)
      list(APPEND allowed ${l})
    endif()
  endforeach()
  if(allowed)
    list(JOIN allowed ", " text)
    set(text "only ${text}")
  else()
    set(text "no other layer")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(files)
foreach(dir modules src net)
  file(GLOB_RECURSE found LIST_DIRECTORIES false RELATIVE "${ROOT}"
       "${ROOT}/${dir}/*.cppm" "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.hpp" "${ROOT}/${dir}/*.h"
       "${ROOT}/${dir}/*.ixx" "${ROOT}/${dir}/*.ipp" "${ROOT}/${dir}/*.inc" "${ROOT}/${dir}/*.in")
  list(APPEND files ${found})
endforeach()
list(SORT files)
list(LENGTH files file_count)
if(file_count EQUAL 0)
  message(FATAL_ERROR "layering: no sources under '${ROOT}' (modules/, src/, net/): wrong ROOT?")
endif()

set(errors)
set(unplaced_dirs)
set(edges 0)
foreach(rel IN LISTS files)
  place("${rel}" layer private)
  if(layer STREQUAL "")
    # Once per folder: a new folder of 30 files is one thing to place.
    get_filename_component(folder "${rel}" DIRECTORY)
    if(NOT folder IN_LIST unplaced_dirs)
      list(APPEND unplaced_dirs "${folder}")
      list(APPEND errors "${rel}: cannot place this file in the layer order (${order}), nor any other of ${folder}/ left unplaced: put it under modules/<layer>/ or src/<layer>/, or add it or its folder to places in tests/layering/check_layers.cmake")
    endif()
    continue()
  endif()
  rank_of("${layer}" rank)
  get_filename_component(dir "${ROOT}/${rel}" DIRECTORY)
  file(READ "${ROOT}/${rel}" text)
  # One list element per line: first disarm what CMake lists treat specially
  # (put back in the report).
  string(REPLACE "\\" "@@BSL@@" text "${text}")
  string(REPLACE ";" "@@SEMI@@" text "${text}")
  string(REPLACE "[" "@@LBR@@" text "${text}")
  string(REPLACE "]" "@@RBR@@" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(NOT line MATCHES "^[ \t]*(#|import|export|module)")
      continue()
    endif()
    set(where "${rel}:${n}")
    string(STRIP "${line}" shown)
    # A module declaration must name the layer of its folder.
    if(line MATCHES "^[ \t]*(export[ \t]+)?module[ \t]+(mpcache[A-Za-z0-9_.]*)")
      module_layer("${CMAKE_MATCH_2}" declared)
    else()
      set(declared "")
    endif()
    if(NOT declared STREQUAL "" AND NOT declared STREQUAL "-")
      list(FIND foundation_modules "${declared}" declares_foundation)
      if(declares_foundation GREATER -1 AND layer STREQUAL "base")
        # a foundation module (mpcache.std) lives below core
      elseif(NOT declared STREQUAL layer)
        list(APPEND errors "${where}: declares a unit of another layer (${declared}) than its place (${layer}): '${shown}'")
      endif()
    endif()
    if(line MATCHES "^[ \t]*(export[ \t]+)?import[ \t]+(mpcache[A-Za-z0-9_.]*)")
      module_layer("${CMAKE_MATCH_2}" target)
    else()
      set(target "-")
    endif()
    if(NOT target STREQUAL "-")
      math(EXPR edges "${edges} + 1")
      if(target STREQUAL "top")
        set(target_rank ${top_rank})
        set(target_name "the umbrella module mpcache (every layer)")
      else()
        list(FIND foundation_modules "${target}" is_foundation)
        if(NOT is_foundation EQUAL -1)
          continue()
        endif()
        rank_of("${target}" target_rank)
        set(target_name "${target}")
      endif()
      if(target_rank STREQUAL "")
        list(APPEND errors "${where}: imports mpcache.${target}, which is not in the layer order (${order}): add it to layers or foundation_modules in tests/layering/check_layers.cmake")
      elseif(target_rank GREATER rank)
        what_may("${layer}" may)
        list(APPEND errors "${where}: upward edge ${layer} -> ${target_name}: '${shown}' (order ${order}, so ${layer} may import ${may})")
      elseif(target IN_LIST client_only_layers AND NOT target STREQUAL layer AND NOT layer STREQUAL "top")
        list(APPEND errors "${where}: edge ${layer} -> ${target}: '${shown}' (${target} is client-only: no layer imports it, only the umbrella module)")
      endif()
    endif()
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*([\"<])([^\">]+)[\">]")
      set(kind "${CMAKE_MATCH_1}")
      set(path "${CMAKE_MATCH_2}")
      set(candidates "${ROOT}/modules/${path}")
      if(kind STREQUAL "\"")
        list(PREPEND candidates "${dir}/${path}")
      endif()
      set(resolved "")
      foreach(c IN LISTS candidates)
        if(resolved STREQUAL "" AND EXISTS "${c}" AND NOT IS_DIRECTORY "${c}")
          cmake_path(NORMAL_PATH c OUTPUT_VARIABLE resolved)
        endif()
      endforeach()
      if(resolved STREQUAL "")
        continue()  # std and system headers
      endif()
      math(EXPR edges "${edges} + 1")
      cmake_path(RELATIVE_PATH resolved BASE_DIRECTORY "${ROOT}" OUTPUT_VARIABLE target_rel)
      if(target_rel MATCHES "^[.][.]/" OR NOT target_rel MATCHES "^(modules|src|net)/")
        list(APPEND errors "${where}: includes '${target_rel}', outside the library (modules/, src/, net/): '${shown}'")
        continue()
      endif()
      place("${target_rel}" target_layer target_private)
      if(target_layer STREQUAL "")
        continue()  # reported as a file that cannot be placed
      endif()
      rank_of("${target_layer}" target_rank)
      if(target_rank GREATER rank)
        what_may("${layer}" may)
        list(APPEND errors "${where}: upward edge ${layer} -> ${target_layer}: '${shown}' includes ${target_rel} (order ${order}, so ${layer} may use ${may})")
      elseif(target_layer IN_LIST client_only_layers AND NOT target_layer STREQUAL layer AND NOT layer STREQUAL "top")
        list(APPEND errors "${where}: edge ${layer} -> ${target_layer}: '${shown}' includes ${target_rel} (${target_layer} is client-only: no layer uses it, only the umbrella module)")
      elseif(target_private AND NOT target_layer STREQUAL layer)
        list(APPEND errors "${where}: ${layer} includes ${target_rel}, a header private to ${target_layer}: '${shown}' (import mpcache.${target_layer} instead)")
      endif()
    endif()
  endforeach()
endforeach()

list(LENGTH errors error_count)
if(error_count GREATER 0)
  list(JOIN errors "\n" text)
  string(REPLACE "@@SEMI@@" ";" text "${text}")
  string(REPLACE "@@LBR@@" "[" text "${text}")
  string(REPLACE "@@RBR@@" "]" text "${text}")
  string(REPLACE "@@BSL@@" "\\" text "${text}")
  message("${text}")
  message(FATAL_ERROR "layering: ${error_count} violation(s) of the layer order ${order} in ${ROOT}")
endif()
if(edges EQUAL 0)
  message(FATAL_ERROR "layering: ${file_count} files but no imports or includes of ours under '${ROOT}': is the pattern stale?")
endif()
list(JOIN client_only_layers ", " client_only)
message("layering: ${file_count} files, ${edges} imports and includes of ours, all follow ${order}; no layer uses ${client_only} (client-only)")
