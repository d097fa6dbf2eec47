# The README stays a front door: at most 200 lines, and its first shell
# block is the two commands (the main job, then the tests).
#   cmake -DREADME=path/README.md -P readme_shape.cmake
file(STRINGS "${README}" lines)
list(LENGTH lines count)
if(count GREATER 200)
  message(FATAL_ERROR "README.md has ${count} lines; keep it at most 200 and move detail into docs/")
endif()
file(READ "${README}" text)
string(FIND "${text}" "```sh\n./tools/run\n./tools/test\n```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md's first commands must be ./tools/run and ./tools/test, in one sh block")
endif()
string(FIND "${text}" "```" first_block)
if(NOT first_block EQUAL at)
  message(FATAL_ERROR "README.md: the two commands must be its first code block")
endif()
message(STATUS "README.md: ${count} lines, opens with ./tools/run and ./tools/test")
