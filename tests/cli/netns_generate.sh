#!/usr/bin/env bash
# Three parties in three network namespaces joined by a bridge (in a fourth
# namespace, so the host's own network is not touched), with fresh keys from
# `mpcache keygen`, a cluster.json and the emulated lan: the README recipe.
# The client's text must equal that of an in-process run. Exits 77 (ctest
# SKIP_RETURN_CODE) where namespaces cannot be made (not root, no ip, a
# container without CAP_SYS_ADMIN).
#   netns_generate.sh MPCACHE_CLI WORK_DIR
set -euo pipefail
cli=$1
work=$2
prompt="It is a truth universally acknowledged"
ns=mpcg$$
command -v ip >/dev/null || { echo "SKIP: no ip command"; exit 77; }
if ! ip netns add "${ns}b" 2>/dev/null; then echo "SKIP: ip netns add not permitted here"; exit 77; fi
cleanup() {
  for n in "${ns}0" "${ns}1" "${ns}2" "${ns}b"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
ip -n "${ns}b" link add br0 type bridge
ip -n "${ns}b" link set br0 up
for i in 0 1 2; do
  ip netns add "${ns}$i"
  ip link add "v$i" netns "${ns}$i" type veth peer name "b$i" netns "${ns}b"
  ip -n "${ns}b" link set "b$i" master br0 up
  ip -n "${ns}$i" link set lo up
  ip -n "${ns}$i" addr add "10.77.0.$((i + 1))/24" dev "v$i"
  ip -n "${ns}$i" link set "v$i" up
done
rm -rf "$work" && mkdir -p "$work"
"$cli" keygen --out "$work/keys" >/dev/null
cat > "$work/cluster.json" <<JSON
{"timeout_ms": 10000,
 "parties": [{"host": "10.77.0.1", "port": 7100, "public_key": "keys/p0.pub", "secret_key": "keys/p0.key"},
             {"host": "10.77.0.2", "port": 7100, "public_key": "keys/p1.pub", "secret_key": "keys/p1.key"},
             {"host": "10.77.0.3", "port": 7100, "public_key": "keys/p2.pub", "secret_key": "keys/p2.key"}]}
JSON
common=(generate --config "$work/cluster.json" --link lan --tokens 4)
ip netns exec "${ns}1" "$cli" "${common[@]}" --id 1 > "$work/p1.out" 2>&1 & p1=$!
ip netns exec "${ns}2" "$cli" "${common[@]}" --id 2 > "$work/p2.out" 2>&1 & p2=$!
status=0
ip netns exec "${ns}0" "$cli" "${common[@]}" --id 0 --prompt "$prompt" > "$work/p0.out" 2>&1 || status=$?
wait $p1 || status=$?
wait $p2 || status=$?
cat "$work/p0.out" "$work/p1.out" "$work/p2.out"
[ "$status" = 0 ] || { echo "FAIL: a party exited with status $status"; exit 1; }
grep -q "tcp/[a-z_]*+aead+emulated-lan" "$work/p0.out" || { echo "FAIL: not over the encrypted emulated lan"; exit 1; }
text=$(grep "generated, learned by the client only" "$work/p0.out")
"$cli" generate --in-process --tokens 4 --prompt "$prompt" > "$work/in_process.out"
expected=$(grep "generated, learned by the client only" "$work/in_process.out")
[ -n "$text" ] && [ "$text" = "$expected" ] || { echo "FAIL: '$text' != in-process '$expected'"; exit 1; }
echo "PASS: $text"
