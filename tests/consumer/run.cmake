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
step(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G Ninja
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/stage -DCMAKE_BUILD_TYPE=Release
     "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}")
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${WORK_DIR}/build/consumer")
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
