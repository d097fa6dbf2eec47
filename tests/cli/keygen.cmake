# `mpcache keygen`: secret keys are born 0600 and their folder 0700 whatever
# the umask (every run here has umask 000, so a mode left to the umask would
# show), public keys 0644; existing keys and links are never overwritten
# without --force (and --force replaces a link, not its target), only the
# last folder of --out is created; each refusal exits non-zero with its
# message and leaves the files as they were.
#   -DCLI=path/to/mpcache -DWORK_DIR=dir
cmake_minimum_required(VERSION 3.28)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
function(run expect_rc regex)
  execute_process(COMMAND sh -c "umask 000 && exec \"$@\"" sh "${CLI}" keygen ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("keygen ${ARGN}: ${rc}\n${out}${err}")
  if(expect_rc STREQUAL "0" AND NOT rc STREQUAL "0")
    message(FATAL_ERROR "keygen ${ARGN}: expected success, got '${rc}'")
  elseif(expect_rc STREQUAL "nonzero" AND NOT rc MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "keygen ${ARGN}: expected a failure exit status, got '${rc}'")
  endif()
  if(NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "keygen ${ARGN}: output does not match '${regex}'")
  endif()
endfunction()
function(mode_of file out_var)
  execute_process(COMMAND stat -c %a "${file}" OUTPUT_VARIABLE m OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(${out_var} "${m}" PARENT_SCOPE)
endfunction()
# expect_mode(file mode): a regular file (or folder) with exactly this mode.
function(expect_mode file mode)
  if(IS_SYMLINK "${file}" OR NOT EXISTS "${file}")
    message(FATAL_ERROR "${file}: missing or a symbolic link")
  endif()
  mode_of("${file}" m)
  if(NOT m STREQUAL "${mode}")
    message(FATAL_ERROR "${file} has mode ${m}, not ${mode}")
  endif()
endfunction()
# expect_keys(dir parties): pN.key 0600 and pN.pub 0644 for each party, all
# keys different.
function(expect_keys dir parties)
  math(EXPR last "${parties} - 1")
  set(seen)
  foreach(i RANGE ${last})
    expect_mode("${dir}/p${i}.key" 600)
    expect_mode("${dir}/p${i}.pub" 644)
    file(READ "${dir}/p${i}.key" secret)
    file(READ "${dir}/p${i}.pub" public)
    if(secret STREQUAL "" OR public STREQUAL "" OR secret STREQUAL public)
      message(FATAL_ERROR "${dir}/p${i}: empty key files, or the secret equals the public key")
    endif()
    string(SHA256 digest "${secret}")
    if(digest IN_LIST seen)
      message(FATAL_ERROR "${dir}/p${i}.key: the same secret key as another party's")
    endif()
    list(APPEND seen ${digest})
  endforeach()
endfunction()

# A fresh folder (its parent exists): created 0700, keys 0600, public keys
# 0644, one line per party naming its files.
run(0 "created folder .*/keys \\(mode 0700\\)\n.*/keys/p0.key .*/keys/p0.pub\n.*/keys/p1.key .*/keys/p1.pub\n.*/keys/p2.key .*/keys/p2.pub\n"
    --out "${WORK_DIR}/keys")
expect_mode("${WORK_DIR}/keys" 700)
expect_keys("${WORK_DIR}/keys" 3)
file(GLOB made RELATIVE "${WORK_DIR}/keys" "${WORK_DIR}/keys/*")
list(SORT made)
if(NOT made STREQUAL "p0.key;p0.pub;p1.key;p1.pub;p2.key;p2.pub")
  message(FATAL_ERROR "keygen wrote ${made}, expected p0..p2 .key and .pub")
endif()
file(READ "${WORK_DIR}/keys/p0.key" first)

# A second run keeps the keys unless --force.
run(nonzero "p0.key' already exists; refusing to overwrite a key file \\(--force replaces it\\)" --out "${WORK_DIR}/keys")
file(READ "${WORK_DIR}/keys/p0.key" again)
if(NOT again STREQUAL first)
  message(FATAL_ERROR "a refused keygen changed p0.key")
endif()
run(0 "p0.key" --out "${WORK_DIR}/keys" --force)
file(READ "${WORK_DIR}/keys/p0.key" forced)
if(forced STREQUAL first)
  message(FATAL_ERROR "keygen --force did not replace p0.key")
endif()
expect_keys("${WORK_DIR}/keys" 3)  # replaced files are born with the same modes

# A link planted at the key's path is not followed.
file(MAKE_DIRECTORY "${WORK_DIR}/planted")
file(WRITE "${WORK_DIR}/target" "precious\n")
file(CREATE_LINK "${WORK_DIR}/target" "${WORK_DIR}/planted/p0.key" SYMBOLIC)
run(nonzero "'.*/planted/p0.key' already exists; refusing to overwrite a key file \\(--force replaces it\\)"
    --out "${WORK_DIR}/planted" --parties 1)
run(0 "p0.key" --out "${WORK_DIR}/planted" --parties 1 --force)
file(READ "${WORK_DIR}/target" target)
if(NOT target STREQUAL "precious\n")
  message(FATAL_ERROR "keygen wrote through a symbolic link")
endif()
if(IS_SYMLINK "${WORK_DIR}/planted/p0.key")
  message(FATAL_ERROR "keygen --force left the link in place")
endif()
expect_keys("${WORK_DIR}/planted" 1)

# --out naming a file, and a party count out of range, are refused.
file(WRITE "${WORK_DIR}/a-file" "not a folder\n")
run(nonzero "keygen: '.*/a-file' exists and is not a folder" --out "${WORK_DIR}/a-file")
file(READ "${WORK_DIR}/a-file" still)
if(NOT still STREQUAL "not a folder\n")
  message(FATAL_ERROR "a refused keygen changed the file named by --out")
endif()
run(nonzero "--parties: Value 0 not in range" --out "${WORK_DIR}/zero" --parties 0)
if(EXISTS "${WORK_DIR}/zero")
  message(FATAL_ERROR "keygen --parties 0 created its folder")
endif()

# Only the last folder is created.
run(nonzero "its parent folder '.*/no/such' does not exist" --out "${WORK_DIR}/no/such/dir")
if(EXISTS "${WORK_DIR}/no")
  message(FATAL_ERROR "keygen created parent folders")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
