# bench/ and tools/ do not use each other: what both need lives in
# mpcache-jobs (src/jobs), which both link. Fails, naming what it found, if
#   * a target defined under bench/ uses, directly or through other targets
#     of ours, one defined under tools/, or the other way round: links it
#     (any keyword, generator expressions too), depends on it
#     (add_dependencies) or names it in $<TARGET_*:...> (e.g. a path to its
#     executable in a compile definition); or has an include folder in the
#     other's source tree (the graph: tests/layering/target_graph.cmake);
#   * a C++ source under bench/ starts a process (popen, system, exec*,
#     posix_spawn, fork): the bench runs party processes only through
#     mpcache-jobs (run_local_job), never our CLI;
#   * a C++ source under one includes a file of the other, or names the
#     other's program (mpcache-bench in tools/; MPCACHE_CLI or an `mpcache`
#     subcommand line in bench/); calls and names count in code, not in //
#     comments;
#   * a CMakeLists.txt under one names a target or the folder of the other.
#   cmake -DROOT=<source tree> -DGRAPH=<build>/target_graph.cmake -P bench_tools_independent.cmake
# Data the bench reads from tools/ (the bundled model tools/model/, the
# script tools/train/extract_austen.py named in an error message) is not
# code and is allowed.
cmake_minimum_required(VERSION 3.28)
foreach(v ROOT GRAPH)
  if(NOT DEFINED ${v} OR "${${v}}" STREQUAL "")
    message(FATAL_ERROR "bench_tools_independent: -D${v}=... is required")
  endif()
endforeach()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
if(NOT EXISTS "${GRAPH}")
  message(FATAL_ERROR "bench_tools_independent: no target graph '${GRAPH}' (written at configure time)")
endif()
include("${GRAPH}")

set(sides bench tools)
set(errors)

# read_lines(path out): the file's lines as a list, with what CMake lists
# treat specially disarmed (put back by shown(), ';' only in the report).
function(read_lines path out)
  file(READ "${path}" text)
  string(REPLACE "\\" "@@BSL@@" text "${text}")
  string(REPLACE ";" "@@SEMI@@" text "${text}")
  string(REPLACE "[" "@@LBR@@" text "${text}")
  string(REPLACE "]" "@@RBR@@" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
function(shown line out)
  string(STRIP "${line}" line)
  string(REPLACE "@@LBR@@" "[" line "${line}")
  string(REPLACE "@@RBR@@" "]" line "${line}")
  string(REPLACE "@@BSL@@" "\\" line "${line}")
  set(${out} "${line}" PARENT_SCOPE)
endfunction()
# under(path dir out): whether `path` is `dir` or inside it (no regex: ROOT
# may hold regex characters).
function(under path dir out)
  string(FIND "${path}/" "${dir}/" at)
  if(at EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# side_of(rel out): bench, tools or "" for a folder relative to ROOT.
function(side_of rel out)
  set(s "")
  foreach(side IN LISTS sides)
    if(rel STREQUAL side OR rel MATCHES "^${side}/")
      set(s ${side})
    endif()
  endforeach()
  set(${out} "${s}" PARENT_SCOPE)
endfunction()
function(other_of side out)
  if(side STREQUAL "bench")
    set(${out} tools PARENT_SCOPE)
  else()
    set(${out} bench PARENT_SCOPE)
  endif()
endfunction()

# 1. The target graph.
set(side_targets_bench)
set(side_targets_tools)
foreach(t IN LISTS targets)
  side_of("${dir_${t}}" s)
  if(s)
    list(APPEND side_targets_${s} ${t})
  endif()
endforeach()
list(LENGTH side_targets_bench nb)
list(LENGTH side_targets_tools nt)
if(nb EQUAL 0 OR nt EQUAL 0)
  list(APPEND errors "the graph has no target under bench/ (${nb}) or tools/ (${nt}): is ${GRAPH} stale, or were they not built (MPCACHE_BUILD_BENCH, MPCACHE_BUILD_TOOLS)?")
endif()
foreach(t IN LISTS targets)
  side_of("${dir_${t}}" side)
  if(NOT side)
    continue()
  endif()
  other_of(${side} other)
  # Breadth-first over uses_*, remembering how each target was reached.
  set(seen ${t})
  set(queue ${t})
  set(via_${t} "${t}")
  while(queue)
    list(POP_FRONT queue u)
    foreach(v IN LISTS uses_${u})
      if(v IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${v})
      list(APPEND queue ${v})
      set(via_${v} "${via_${u}} -> ${v}")
      side_of("${dir_${v}}" vs)
      if(vs STREQUAL other)
        list(APPEND errors "target ${t} (${dir_${t}}/) uses ${v} (${dir_${v}}/): ${via_${v}}")
      endif()
    endforeach()
  endwhile()
  foreach(p IN LISTS paths_${t})
    string(REGEX REPLACE "^\\$<[A-Z_]+:(.*)>$" "\\1" p "${p}")  # $<BUILD_INTERFACE:path>
    under("${p}" "${ROOT}/${other}" inside)
    if(inside)
      list(APPEND errors "target ${t} (${dir_${t}}/) has an include folder in ${other}/: ${p}")
    endif()
  endforeach()
endforeach()

# 2. Sources and CMakeLists.
set(spawn_re "(^|[^A-Za-z0-9_.>])(popen|system|execl|execlp|execle|execv|execvp|execvpe|fexecve|posix_spawn|posix_spawnp|fork|vfork)[ \t]*\\(")
set(names_bench_in_tools "mpcache-bench|MPCACHE_BENCH")
set(names_tools_in_bench "MPCACHE_CLI|\"mpcache (local|party|generate|demo|keygen|decode)[ \"]")
foreach(side IN LISTS sides)
  other_of(${side} other)
  file(GLOB_RECURSE sources LIST_DIRECTORIES false RELATIVE "${ROOT}"
       "${ROOT}/${side}/*.cpp" "${ROOT}/${side}/*.hpp" "${ROOT}/${side}/*.h" "${ROOT}/${side}/*.cc")
  foreach(rel IN LISTS sources)
    read_lines("${ROOT}/${rel}" lines)
    set(n 0)
    foreach(line IN LISTS lines)
      math(EXPR n "${n} + 1")
      shown("${line}" shown)
      # Calls and names count in code, not in // comments (a comment may say
      # what the code does not do).
      string(REGEX REPLACE "//.*" "" code "${line}")
      if(side STREQUAL "bench" AND code MATCHES "${spawn_re}")
        list(APPEND errors "${rel}:${n}: the bench starts a process ('${CMAKE_MATCH_2}'): run party processes through mpcache-jobs (run_local_job): '${shown}'")
      endif()
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*)[\">]")
        set(inc "${CMAKE_MATCH_1}")
        get_filename_component(dir "${ROOT}/${rel}" DIRECTORY)
        get_filename_component(target "${dir}/${inc}" ABSOLUTE)
        under("${target}" "${ROOT}/${other}" inside)
        if(inc MATCHES "(^|/)${other}/" OR inside)
          list(APPEND errors "${rel}:${n}: ${side}/ includes a file of ${other}/: '${shown}'")
        endif()
      endif()
      if(side STREQUAL "tools" AND code MATCHES "${names_bench_in_tools}")
        list(APPEND errors "${rel}:${n}: tools/ names the bench's program: '${shown}'")
      endif()
      if(side STREQUAL "bench" AND code MATCHES "${names_tools_in_bench}")
        list(APPEND errors "${rel}:${n}: bench/ names the CLI or runs one of its commands: '${shown}'")
      endif()
    endforeach()
  endforeach()
  # CMakeLists: the other side's targets and folder.
  file(GLOB_RECURSE lists LIST_DIRECTORIES false RELATIVE "${ROOT}" "${ROOT}/${side}/CMakeLists.txt"
       "${ROOT}/${side}/*.cmake")
  foreach(rel IN LISTS lists)
    read_lines("${ROOT}/${rel}" lines)
    set(n 0)
    foreach(line IN LISTS lines)
      math(EXPR n "${n} + 1")
      string(REGEX REPLACE "#.*" "" code "${line}")
      shown("${line}" shown)
      foreach(o IN LISTS side_targets_${other})
        string(REGEX REPLACE "([.+])" "[\\1]" o_re "${o}")
        if(code MATCHES "(^|[^A-Za-z0-9_.+-])${o_re}([^A-Za-z0-9_.+-]|$)")
          list(APPEND errors "${rel}:${n}: names ${o}, a target of ${other}/: '${shown}'")
        endif()
      endforeach()
      if(code MATCHES "(^|[^A-Za-z0-9_])${other}/")
        list(APPEND errors "${rel}:${n}: names the folder ${other}/: '${shown}'")
      endif()
    endforeach()
  endforeach()
endforeach()

list(LENGTH errors count)
if(count GREATER 0)
  list(JOIN errors "\n" text)
  string(REPLACE "@@SEMI@@" ";" text "${text}")
  message("${text}")
  message(FATAL_ERROR "bench_tools_independent: ${count} use(s) between bench/ and tools/ (share code through mpcache-jobs, src/jobs, instead)")
endif()
list(LENGTH targets all)
list(JOIN side_targets_bench ", " in_bench)
list(JOIN side_targets_tools ", " in_tools)
message("bench_tools_independent: ${all} targets (bench/: ${in_bench}; tools/: ${in_tools}) and the sources of bench/ and tools/: neither uses the other")
