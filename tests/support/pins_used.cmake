# Every pin in tests/pinned_costs.txt is checked somewhere: its name appears
# in a test source (check_pinned) or in tests/CMakeLists.txt (pinned_bench,
# pinned_cost). A pin no test reads would only look checked.
#   cmake -DTESTS=<tests folder> -P pins_used.cmake
file(STRINGS ${TESTS}/pinned_costs.txt lines REGEX "^[^#]")
file(GLOB_RECURSE sources ${TESTS}/*.cpp ${TESTS}/*.hpp)
list(FILTER sources EXCLUDE REGEX "pinned_costs_test\\.cpp$")  # the checker's own test
set(text "")
foreach(source IN LISTS sources ITEMS ${TESTS}/CMakeLists.txt)
  file(READ ${source} content)
  string(APPEND text "${content}")
endforeach()
set(unused "")
foreach(line IN LISTS lines)
  string(REGEX MATCH "^[^ \t]+" name "${line}")
  string(FIND "${text}" " ${name})" bench_use)
  string(FIND "${text}" "\"${name}\"" test_use)
  if(bench_use EQUAL -1 AND test_use EQUAL -1)
    list(APPEND unused ${name})
  endif()
endforeach()
if(unused)
  message(FATAL_ERROR "pinned costs no test checks: ${unused}")
endif()
