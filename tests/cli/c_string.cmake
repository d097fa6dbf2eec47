# c_string_body(out text): `text` as mpcache generate prints it, a C string
# body (backslash, quote, newline and tab escaped). Included by the CLI
# scripts that look for the client's printed text.
function(c_string_body out text)
  string(REPLACE "\\" "\\\\" s "${text}")
  string(REPLACE "\"" "\\\"" s "${s}")
  string(REPLACE "\n" "\\n" s "${s}")
  string(REPLACE "\t" "\\t" s "${s}")
  set(${out} "${s}" PARENT_SCOPE)
endfunction()
