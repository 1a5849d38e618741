# Kernel binaries carried between device calls.  Every call starts on a fresh machine, where
# compiling the kernels took 70-90 s of each call's device time (docs/perf.md, session 13); the
# binaries are cached under a hash of the source, the options, NVRTC's version and the
# architecture (pti_cli/backends/compile.py), so a binary built by an earlier call of the same
# source on the same machine kind is the one the compile would give.
#   In a call (carry [".whl", ".carry"]):  source scripts/device_cache.sh   (sets PTI_CACHE_DIR)
#                                           ... kcache_save                 (writes $OUT/kcache.tar.gz)
#   Here, after the call:                   tar -xzf /work/.device/N/kcache.tar.gz -C .carry
# .carry/ is git-ignored; delete .carry/pti-cache when it grows (it travels with every call).
# On a fresh checkout, scripts/device_prep.sh builds .whl/ and this tree's binaries into .carry/ here.
export PTI_CACHE_DIR="$PWD/.carry/pti-cache"
mkdir -p "$PTI_CACHE_DIR/kernels"
# scripts/device_prep.sh carries the binaries xz-compressed (a 9.7 MB sm_90a binary is 0.65 MB so): unpack them
python3 - "$PTI_CACHE_DIR/kernels" <<'PY'
import lzma, sys
from pathlib import Path
for f in Path(sys.argv[1]).glob("*.bin.xz"):
    if not f.with_suffix("").exists():
        f.with_suffix("").write_bytes(lzma.decompress(f.read_bytes()))
PY
# Only this tree's binaries (pti_kernel.hip's and pti_ops.hip's for this GPU), compressed: the device
# returns files of at most 16 MiB; a cache holding several trees' builds outgrew that in session 14, and
# one tree's three binaries, uncompressed, in session 29.
kcache_save() {
    local names
    names=$(python3 -c "
import os, torch
from pti_cli.backends.compile import cache_path, device_arch, hopper_wanted
major, minor = torch.cuda.get_device_capability()
hopper = hopper_wanted()
# (the GPU tests build backends with and without the Hopper kernels: both of pti_kernel.hip's binaries)
for n, arch in (('pti_kernel.hip', device_arch(major, minor, hopper)), ('pti_kernel.hip', f'sm_{major}{minor}'),
                ('pti_ops.hip', f'sm_{major}{minor}')):
    p = cache_path('cuda', arch, n)
    if p.is_file():
        print('pti-cache/kernels/' + p.name)") || return 1
    names=$(echo "$names" | sort -u)
    [ -n "$names" ] && tar -czf "${OUT:-/tmp/out}/kcache.tar.gz" -C "$PWD/.carry" $names
}
