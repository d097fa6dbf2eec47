# ctest driver: install the built tree into a staging prefix, configure and
# build tests/consumer against it with find_package(mpcache), run it. The
# consumer gets the same compile and link flags (sanitizers) as the library.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR CXX_COMPILER SCAN_DEPS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/stage")
# The installed Python package (when built: -DPYTHON=its interpreter) finds
# the installed `mpcache` (its party processes) and the installed model.
if(PYTHON)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=MPCACHE_CLI
                          PYTHONPATH=${WORK_DIR}/stage/lib/python3/dist-packages ${PYTHON} -c
                          "import mpcache; g = mpcache.generate('It is a truth', tokens=4); print(mpcache.__file__); print(mpcache.default_model()); print(len(g.tokens))"
                  WORKING_DIRECTORY "${WORK_DIR}" OUTPUT_VARIABLE printed ERROR_VARIABLE errors RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT printed MATCHES "^${WORK_DIR}/stage/lib/python3/dist-packages/mpcache/__init__.py\n${WORK_DIR}/stage/share/mpcache/model/austen-byte\n4\n$")
    message(FATAL_ERROR "the installed Python package (${rc}): ${printed}${errors}")
  endif()
  message(STATUS "installed Python package: ${printed}")
endif()
# The README's library example is built too, exactly as the README prints
# it (its one ```cpp block), and run from the repository root (it reads
# tools/model/austen-byte): the snippet a reader copies compiles and works.
set(snippet_args "")
if(DEFINED README)
  file(READ "${README}" readme)
  string(REGEX MATCH "```cpp\n([^`]*)```" block "${readme}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "no ```cpp block in ${README}")
  endif()
  file(WRITE "${WORK_DIR}/readme_snippet.cpp" "${CMAKE_MATCH_1}")
  set(snippet_args "-DREADME_SNIPPET=${WORK_DIR}/readme_snippet.cpp")
endif()
step(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja ${snippet_args}
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/stage -DCMAKE_BUILD_TYPE=Release
     "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}")
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${WORK_DIR}/build/consumer")
if(DEFINED README)
  get_filename_component(repo "${README}" DIRECTORY)
  execute_process(COMMAND "${WORK_DIR}/build/readme_snippet" WORKING_DIRECTORY "${repo}"
                  OUTPUT_VARIABLE printed RESULT_VARIABLE rc)
  string(LENGTH "${printed}" printed_bytes)
  # 8 bytes the client learned, and a newline.
  if(NOT rc EQUAL 0 OR NOT printed_bytes EQUAL 9)
    message(FATAL_ERROR "the README's example failed (exit ${rc}) or printed other than 8 bytes: '${printed}'")
  endif()
endif()
# The installed CLI uses the installed model, not the source tree's.
set(cli "${WORK_DIR}/stage/bin/mpcache")
if(EXISTS "${cli}")
  execute_process(COMMAND "${cli}" generate --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
  set(model "${WORK_DIR}/stage/share/mpcache/model/austen-byte")
  string(FIND "${help}" "${model}" at)
  if(NOT rc EQUAL 0 OR at EQUAL -1 OR NOT EXISTS "${model}/model.safetensors")
    message(FATAL_ERROR "installed mpcache does not default to ${model} (exit ${rc}):\n${help}")
  endif()
endif()
