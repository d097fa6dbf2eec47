#!/usr/bin/env bash
# Ctrl-C in the middle of `mpcache generate` (3 party processes over TCP):
# the launcher passes SIGINT on, every party cancels the generation
# (Endpoint::cancel), and the run ends with status 130 and an error naming
# the cancellation, well before the 200 tokens asked for; no party is killed.
# Usage: ctrl_c_generate.sh MPCACHE_CLI WORK_DIR
set -u
cli=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
# A background job of a script starts with SIGINT ignored; the launcher and
# the parties install their own handlers, so the signal still arrives.
"$cli" generate --tokens 200 --insecure >"$work/out" 2>"$work/err" &
pid=$!
# Wait for two decoded tokens (lines "... rounds  +"...").
for _ in $(seq 1 3000); do
  [ "$(grep -c 'rounds  +' "$work/out")" -ge 2 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if ! kill -INT "$pid" 2>/dev/null; then
  echo "FAIL: the generation ended before it could be stopped"; cat "$work/out" "$work/err"; exit 1
fi
start=$SECONDS
wait "$pid"
rc=$?
echo "exit status $rc after $((SECONDS - start)) s"; cat "$work/out" "$work/err"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -eq 130 ] || fail "exit status $rc, expected 130 (128 + SIGINT)"
grep -q "stopped by signal 2; the parties cancelled the generation" "$work/err" || fail "no stop message"
grep -q "cancelled" "$work/err" || fail "no party reported the cancellation"
grep -q "were killed" "$work/err" && fail "a party had to be killed"
steps=$(grep -c 'rounds  +' "$work/out")
[ "$steps" -lt 200 ] || fail "all $steps tokens were generated: the stop came too late"
echo "PASS: stopped after $steps tokens"
