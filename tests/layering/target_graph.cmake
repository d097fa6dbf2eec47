# mpcache_write_target_graph(FILE): at configure time, after every
# add_subdirectory, writes the build's own targets and what each one uses,
# for tests/layering/bench_tools_independent.cmake to check at test time:
#   set(targets a;b;...)
#   set(dir_<t> "bench")            # source folder, relative to the project
#   set(uses_<t> "mpcache;...")     # targets of ours it links (any keyword,
#                                   # inside generator expressions too), its
#                                   # add_dependencies, and $<TARGET_*:x> it
#                                   # names in compile definitions, include
#                                   # folders or its command line
#   set(paths_<t> "/abs/...")       # its include folders
# Aliases are resolved to their target; imported targets are not ours.

function(_mpcache_graph_collect dir out)
  get_property(here DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _mpcache_graph_collect("${sub}" more)
    list(APPEND here ${more})
  endforeach()
  set(${out} "${here}" PARENT_SCOPE)
endfunction()

# The targets of ours named by `items` (link items, definitions, ...).
function(_mpcache_graph_named items ours out)
  set(found)
  foreach(item IN LISTS items)
    # Every name-like token, so that $<LINK_ONLY:x>, $<BUILD_INTERFACE:x>,
    # $<TARGET_FILE:x> and x::y are all seen.
    string(REGEX MATCHALL "[A-Za-z0-9_.+-]+(::[A-Za-z0-9_.+-]+)?" tokens "${item}")
    foreach(token IN LISTS tokens)
      if(TARGET "${token}")
        get_target_property(aliased "${token}" ALIASED_TARGET)
        if(aliased)
          set(token "${aliased}")
        endif()
        if(token IN_LIST ours)
          list(APPEND found "${token}")
        endif()
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES found)
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

function(mpcache_write_target_graph file)
  _mpcache_graph_collect("${PROJECT_SOURCE_DIR}" ours)
  set(text "# Written by tests/layering/target_graph.cmake at configure time.\nset(targets \"${ours}\")\n")
  foreach(t IN LISTS ours)
    get_target_property(type ${t} TYPE)
    get_target_property(src ${t} SOURCE_DIR)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${src}")
    set(items)
    set(props INTERFACE_LINK_LIBRARIES MANUALLY_ADDED_DEPENDENCIES INTERFACE_COMPILE_DEFINITIONS
              INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      list(APPEND props LINK_LIBRARIES COMPILE_DEFINITIONS INCLUDE_DIRECTORIES)
    endif()
    set(paths)
    foreach(p IN LISTS props)
      get_target_property(v ${t} ${p})
      if(v)
        list(APPEND items ${v})
        if(p MATCHES "INCLUDE_DIRECTORIES")
          list(APPEND paths ${v})
        endif()
      endif()
    endforeach()
    _mpcache_graph_named("${items}" "${ours}" uses)
    list(REMOVE_ITEM uses ${t})
    string(REPLACE "\"" "\\\"" paths "${paths}")
    string(APPEND text "set(dir_${t} \"${rel}\")\nset(uses_${t} \"${uses}\")\nset(paths_${t} \"${paths}\")\n")
  endforeach()
  file(CONFIGURE OUTPUT "${file}" CONTENT "${text}" @ONLY)
endfunction()
