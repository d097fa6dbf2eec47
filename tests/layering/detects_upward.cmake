# The layering check itself is tested: it passes a small well-layered tree,
# fails the same tree with an upward import and an upward include (naming
# file:line and the edge), and fails a copy of the real sources with one
# upward import added.
#   -DSOURCE_ROOT=<repo> -DWORK_DIR=<scratch dir>
cmake_minimum_required(VERSION 3.28)
set(checker "${CMAKE_CURRENT_LIST_DIR}/check_layers.cmake")
file(REMOVE_RECURSE "${WORK_DIR}")

# check(root expect_rc out_var): runs the checker on root; its exit status must be expect_rc.
function(check root expect_rc out_var)
  execute_process(COMMAND "${CMAKE_COMMAND}" -DROOT=${root} -P "${checker}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("--- layering check of ${root}: exit status ${rc}\n${out}${err}")
  if(NOT rc STREQUAL "${expect_rc}")
    message(FATAL_ERROR "the layering check of ${root} exited with '${rc}', expected ${expect_rc}")
  endif()
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()
function(expect text regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "the layering check's output does not match: ${regex}")
  endif()
endfunction()

# A tree that follows the order: core <- proto <- model, a private header
# used by its own layer, the shared prelude, the client-only text on core, the
# umbrella importing all.
set(good "${WORK_DIR}/good")
file(WRITE "${good}/modules/prelude.hpp" "#pragma once\n#include <vector>\n")
file(WRITE "${good}/modules/core/ring.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.core:ring;\n\nexport namespace mpcache { int ring(); }\n")
file(WRITE "${good}/modules/proto/rss3.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.proto:rss3;\nimport mpcache.core;\n")
file(WRITE "${good}/modules/model/decoder.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.model:decoder;\nimport mpcache.core;\nexport import mpcache.proto;\n")
file(WRITE "${good}/src/model/reader.hpp" "#pragma once\n")
file(WRITE "${good}/src/model/decoder.cpp"
  "module;\n#include \"prelude.hpp\"\n#include \"reader.hpp\"\nmodule mpcache.model;\nimport mpcache.core;\n")
file(WRITE "${good}/modules/text/text.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.text;\nimport mpcache.core;\n")
file(WRITE "${good}/modules/mpcache.cppm"
  "export module mpcache;\nexport import mpcache.core;\nexport import mpcache.text;\nexport import mpcache.model;\n")
check("${good}" 0 out)
expect("${out}" "layering: 8 files, 14 imports and includes of ours, all follow core -> text -> async -> net -> proto -> ops -> kv -> model -> serve; no layer uses text \\(client-only\\)")

# The same tree, one upward import (core imports model, line 4), one
# upward include (proto reaches into model's private header, line 3), text
# importing a layer right of it (proto, line 5) and model importing the
# client-only text (line 6).
set(bad "${WORK_DIR}/bad")
file(COPY "${good}/" DESTINATION "${bad}")
file(WRITE "${bad}/modules/core/ring.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.core:ring;\nimport mpcache.model;\nexport namespace mpcache { int ring(); }\n")
file(WRITE "${bad}/src/proto/rss3.cpp"
  "module;\n#include \"prelude.hpp\"\n#include \"../model/reader.hpp\"\nmodule mpcache.proto;\n")
file(WRITE "${bad}/modules/text/text.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.text;\nimport mpcache.core;\nimport mpcache.proto;\n")
file(WRITE "${bad}/modules/model/decoder.cppm"
  "module;\n#include \"prelude.hpp\"\nexport module mpcache.model:decoder;\nimport mpcache.core;\nexport import mpcache.proto;\nimport mpcache.text;\n")
check("${bad}" 1 out)
expect("${out}" "modules/core/ring.cppm:4: upward edge core -> model: 'import mpcache.model;' \\(order core -> text -> async -> net -> proto -> ops -> kv -> model -> serve, so core may import no other layer\\)")
expect("${out}" "src/proto/rss3.cpp:3: upward edge proto -> model: '#include \"../model/reader.hpp\"' includes src/model/reader.hpp")
expect("${out}" "modules/text/text.cppm:5: upward edge text -> proto: 'import mpcache.proto;' \\(order [^)]*, so text may import only core\\)")
expect("${out}" "modules/model/decoder.cppm:6: edge model -> text: 'import mpcache.text;' \\(text is client-only: no layer imports it, only the umbrella module\\)")
expect("${out}" "layering: 4 violation\\(s\\) of the layer order")

# The real sources (modules/, src/, net/ copied), one upward import added
# to modules/core/ring.cppm just after its module declaration.
set(real "${WORK_DIR}/real")
foreach(dir modules src net)
  file(COPY "${SOURCE_ROOT}/${dir}" DESTINATION "${real}")
endforeach()
file(READ "${SOURCE_ROOT}/modules/core/ring.cppm" ring)
string(FIND "${ring}" "export module mpcache.core:ring;\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "modules/core/ring.cppm no longer declares 'export module mpcache.core:ring;': update this test")
endif()
string(SUBSTRING "${ring}" 0 ${at} before)
string(REGEX MATCHALL "\n" newlines "${before}")
list(LENGTH newlines line)
math(EXPR line "${line} + 2")  # the declaration's line, then ours
string(REPLACE "export module mpcache.core:ring;\n" "export module mpcache.core:ring;\nimport mpcache.model;\n" ring "${ring}")
file(WRITE "${real}/modules/core/ring.cppm" "${ring}")
check("${real}" 1 out)
expect("${out}" "modules/core/ring.cppm:${line}: upward edge core -> model: 'import mpcache.model;'")
file(REMOVE_RECURSE "${WORK_DIR}")
