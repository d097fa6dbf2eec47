# The bench/tools check (bench_tools_independent.cmake) is tested: it passes
# a small tree where both use a shared library only, and fails one where
# they use each other in every way it looks for, naming each.
#   -DWORK_DIR=<scratch dir>
cmake_minimum_required(VERSION 3.28)
set(checker "${CMAKE_CURRENT_LIST_DIR}/bench_tools_independent.cmake")
file(REMOVE_RECURSE "${WORK_DIR}")

function(check root expect_rc out_var)
  execute_process(COMMAND "${CMAKE_COMMAND}" -DROOT=${root} -DGRAPH=${root}/graph.cmake -P "${checker}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("--- bench/tools check of ${root}: exit status ${rc}\n${out}${err}")
  if(NOT rc STREQUAL "${expect_rc}")
    message(FATAL_ERROR "the bench/tools check of ${root} exited with '${rc}', expected ${expect_rc}")
  endif()
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()
function(expect text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "the bench/tools check's output does not match: ${regex}")
  endif()
endfunction()

# Both link the shared library; the bench forks a protocol (p.fork(), not
# a process) and names the CLI in a comment only.
set(good "${WORK_DIR}/good")
file(WRITE "${good}/graph.cmake" "set(targets \"lib;jobs;bench-x;tool-y\")
set(dir_lib \"\")\nset(uses_lib \"\")\nset(paths_lib \"\")
set(dir_jobs \"src/jobs\")\nset(uses_jobs \"lib\")\nset(paths_jobs \"${good}/src/jobs\")
set(dir_bench-x \"bench\")\nset(uses_bench-x \"lib;jobs\")\nset(paths_bench-x \"\")
set(dir_tool-y \"tools\")\nset(uses_tool-y \"lib;jobs\")\nset(paths_tool-y \"\")\n")
file(WRITE "${good}/bench/a.cpp"
  "#include \"shared.hpp\"\n// three processes, as `mpcache local` does\nTask<void> f(P& p) { P q = p.fork(); co_return; }\n")
file(WRITE "${good}/bench/CMakeLists.txt" "add_executable(bench-x a.cpp)\ntarget_link_libraries(bench-x PRIVATE jobs)\n")
file(WRITE "${good}/tools/b.cpp" "#include \"shared.hpp\"\n// mpcache-bench links shared.hpp's library too\nint main() { return 0; }\n")
file(WRITE "${good}/tools/CMakeLists.txt" "add_executable(tool-y b.cpp)  # not tool-x\ntarget_link_libraries(tool-y PRIVATE jobs)\n")
check("${good}" 0 out)
expect("${out}" "bench_tools_independent: 4 targets \\(bench/: bench-x. tools/: tool-y\\)")

# The bench links a library under tools/ through the shared one and
# depends on the CLI, which links a bench library; sources spawn the CLI
# and include each other's files; CMakeLists name each other.
set(bad "${WORK_DIR}/bad")
file(WRITE "${bad}/graph.cmake" "set(targets \"lib;jobs;bench-x;bench-cases;tool-y;tool-util\")
set(dir_lib \"\")\nset(uses_lib \"\")\nset(paths_lib \"\")
set(dir_jobs \"src/jobs\")\nset(uses_jobs \"lib;tool-util\")\nset(paths_jobs \"\")
set(dir_bench-x \"bench\")\nset(uses_bench-x \"lib;jobs;tool-y\")\nset(paths_bench-x \"${bad}/tools\")
set(dir_bench-cases \"bench/cases\")\nset(uses_bench-cases \"lib\")\nset(paths_bench-cases \"\")
set(dir_tool-y \"tools\")\nset(uses_tool-y \"lib;bench-cases\")\nset(paths_tool-y \"\")
set(dir_tool-util \"tools/util\")\nset(uses_tool-util \"lib\")\nset(paths_tool-util \"\")\n")
file(WRITE "${bad}/bench/a.cpp"
  "#include <cstdio>\n#include \"../tools/local.hpp\"\nvoid run(const std::string& a) {\n  FILE* p = ::popen((std::string(MPCACHE_CLI) + a).c_str(), \"r\");\n  std::system(\"mpcache local --job demo\");\n}\n")
file(WRITE "${bad}/bench/CMakeLists.txt" "add_executable(bench-x a.cpp)\nadd_dependencies(bench-x tool-y)\n")
file(WRITE "${bad}/tools/b.cpp" "#include \"op_cases.hpp\"\n#include \"../bench/cases/op_cases.hpp\"\nconst char* b = \"mpcache-bench\";\n")
file(WRITE "${bad}/tools/CMakeLists.txt" "target_link_libraries(tool-y PRIVATE bench-cases)\nadd_subdirectory(../bench/cases cases)\n")
check("${bad}" 1 out)
expect("${out}" "target bench-x \\(bench/\\) uses tool-util \\(tools/util/\\): bench-x -> jobs -> tool-util")
expect("${out}" "target bench-x \\(bench/\\) uses tool-y \\(tools/\\): bench-x -> tool-y")
expect("${out}" "target tool-y \\(tools/\\) uses bench-cases \\(bench/cases/\\): tool-y -> bench-cases")
expect("${out}" "target bench-x \\(bench/\\) has an include folder in tools/")
expect("${out}" "bench/a.cpp:2: bench/ includes a file of tools/")
expect("${out}" "bench/a.cpp:4: the bench starts a process \\('popen'\\)")
expect("${out}" "bench/a.cpp:4: bench/ names the CLI")
expect("${out}" "bench/a.cpp:5: the bench starts a process \\('system'\\)")
expect("${out}" "bench/a.cpp:5: bench/ names the CLI or runs one of its commands")
expect("${out}" "tools/b.cpp:2: tools/ includes a file of bench/")
expect("${out}" "tools/b.cpp:3: tools/ names the bench's program")
expect("${out}" "bench/CMakeLists.txt:2: names tool-y, a target of tools/")
expect("${out}" "tools/CMakeLists.txt:1: names bench-cases, a target of bench/")
expect("${out}" "tools/CMakeLists.txt:2: names the folder bench/")
expect("${out}" "bench_tools_independent: 14 use\\(s\\) between bench/ and tools/")
