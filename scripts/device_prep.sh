#!/bin/bash
# Prepare the two git-ignored folders a device call carries (carry [".whl", ".carry"]), on a fresh checkout here:
#   .whl/    the pure-Python and cp312 wheels the device image lacks (python3 3.12 there; it has torch, numpy,
#            safetensors, tokenizers), installed in the call by docs/bench/wg_call.sh and scripts/gpu_*.sh
#   .carry/  this tree's kernel binaries for sm_90a and sm_90, built here with the device's NVRTC 13.0
#            (make install puts it in .venv), so a call spends no device time compiling (scripts/device_cache.sh);
#            with PROBES="nowait trace" also those probes' binaries (scripts/probe_source.py; PROBE=one, as before);
#            with AB_COMMIT=C also .carry/prev_kernel.hip, commit C's kernel source, and its sm_90a binary (the
#            srcab step of docs/bench/wg_call.sh: SRC_AB=$PWD/.carry/prev_kernel.hip);
#            every binary xz-compressed (device_cache.sh unpacks them in the call): about 0.65 MB each instead of
#            9.7, so the call's 64 MiB hold every probe's
#   bash scripts/device_prep.sh        (after `make install`; about 3 minutes on two cores, 1 more a probe)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
NVRTC=.venv/nvrtc-13.0.88/nvidia/cu13/lib
mkdir -p .whl
$PY -m pip download -q --no-deps -d .whl --python-version 3.12 --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
    gguf typer rich click shellingham markdown-it-py mdurl pygments pydantic pydantic_core annotated-types \
    annotated-doc typing-inspection typing-extensions jinja2 markupsafe psutil pyyaml tqdm
rm -rf .carry/pti-cache && mkdir -p .carry/pti-cache
# binaries NAME:ARCH ...: kernels/NAME for ARCH into .carry/pti-cache with the device's NVRTC (PTI_KERNEL_SOURCE, when
# set, stands for kernels/pti_kernel.hip)
binaries() {
    PTI_CACHE_DIR="$PWD/.carry/pti-cache" $PY - "$NVRTC" "$@" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from check_kernels import load_nvrtc
load_nvrtc(Path(sys.argv[1]))
from pti_cli.backends.compile import cache_path, cached_binary, nvrtc_version
for name, arch in (a.split(":") for a in sys.argv[2:]):
    cached_binary("cuda", arch, name)
    print(nvrtc_version(), name, arch, cache_path("cuda", arch, name).name)
PY
}
binaries pti_kernel.hip:sm_90a pti_kernel.hip:sm_90 pti_ops.hip:sm_90
for probe in ${PROBE:-} ${PROBES:-}; do
    $PY scripts/probe_source.py "$probe" "/tmp/$probe.hip" --compile "$NVRTC" .carry/pti-cache
done
if [ -n "${AB_COMMIT:-}" ]; then   # another commit's kernel source and its sm_90a binary, for wg_call.sh srcab
    git show "$AB_COMMIT:kernels/pti_kernel.hip" > .carry/prev_kernel.hip
    PTI_KERNEL_SOURCE="$PWD/.carry/prev_kernel.hip" binaries pti_kernel.hip:sm_90a
fi
$PY - .carry/pti-cache/kernels <<'PY'
import lzma, sys
from pathlib import Path
for f in Path(sys.argv[1]).glob("*.bin"):
    Path(f"{f}.xz").write_bytes(lzma.compress(f.read_bytes(), preset=6))
    f.unlink()
PY
du -sh .whl .carry
