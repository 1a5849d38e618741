"""Run-time compilation of kernels/pti_kernel.hip.

NVIDIA: NVRTC (cuda-python's `cuda.bindings.nvrtc`) straight to a CUBIN for the
device's sm_XX.  Not PTX: a newer NVRTC's PTX is refused by an older driver,
while a CUBIN for the exact architecture loads.  AMD: hiprtc (hip-python) to a
code object for the device's gfx target.

Binaries are cached in `cache_dir()/kernels/` under a hash of the source, the
options, the compiler's version and the architecture, so a second start costs
a file read.  Compiling needs no GPU (CI checks the source this way).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PtiError

def kernel_path(name: str) -> Path:
    """A source under kernels/: the checkout's (editable installs), else the copy
    a wheel installs under <prefix>/share/pti/kernels (pyproject's data-files)."""
    in_checkout = Path(__file__).resolve().parents[2] / "kernels" / name
    if in_checkout.exists():
        return in_checkout
    return Path(sys.prefix) / "share" / "pti" / "kernels" / name


KERNEL_SOURCE = kernel_path("pti_kernel.hip")
NVRTC_OPTIONS = ("-std=c++17", "-Xptxas=-v")


@dataclass
class Compiled:
    binary: bytes       # CUBIN (NVIDIA) or code object (AMD)
    log: str            # compiler output, with ptxas' resource report on NVIDIA
    arch: str           # "sm_90", "gfx90a", ...
    compiler: str       # "nvrtc 13.0", "hiprtc 6.2"
    cached: bool = False
    resources: dict[str, dict[str, int]] = field(default_factory=dict)


def hopper_wanted() -> bool:
    """PTI_WGMMA: "1" (the default) builds kernels/pti_kernel.hip for sm_90a on sm_90 and loads its Hopper
    matmul; "0": the sm_90 build, the policy kernels only (A/B runs, or to save the ring copies' memory)."""
    v = os.environ.get("PTI_WGMMA", "1")
    if v not in ("0", "1"):
        raise PtiError(f"PTI_WGMMA must be 0 or 1, not {v!r}")
    return v == "1"


def device_arch(major: int, minor: int, hopper: bool = False) -> str:
    """The NVRTC target for a device of compute capability major.minor: with hopper, sm_90a on sm_90 (its
    'a' features, wgmma, for kernels/pti_kernel.hip's Hopper matmul; hopper_wanted), else sm_XX."""
    return "sm_90a" if hopper and (major, minor) == (9, 0) else f"sm_{major}{minor}"


def kernel_source(name: str = "pti_kernel.hip") -> str:
    """Text of kernels/<name> (PTI_KERNEL_SOURCE overrides the matmul source)."""
    default = KERNEL_SOURCE if name == "pti_kernel.hip" else kernel_path(name)
    path = Path(os.environ.get("PTI_KERNEL_SOURCE", default)) if name == "pti_kernel.hip" else default
    try:
        return path.read_text()
    except OSError as e:
        raise PtiError(f"cannot read the kernel source {path}: {e.strerror}") from None


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise PtiError("NVRTC is not installed; install it with: pip install 'cuda-bindings>=13.0' "
                       "'nvidia-cuda-nvrtc>=13.0'") from None
    return nvrtc


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise PtiError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"nvrtc {major}.{minor}"


def parse_resources(log: str) -> dict[str, dict[str, int]]:
    """ptxas' -v report -> {kernel: {registers, stack, spill_stores, spill_loads, smem}}."""
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line) or re.search(
            r"Compiling entry function '(\S+)'", line)
        if m:
            name = m.group(1)
            out.setdefault(name, {"registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0})
            continue
        if name is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[name].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[name]["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            if s:
                out[name]["smem"] = int(s.group(1))
    return out


def compile_nvrtc(source: str, arch: str, options: tuple[str, ...] = NVRTC_OPTIONS) -> Compiled:
    """Compile `source` to a CUBIN for `arch` ("sm_90"); PtiError with the log on failure."""
    nvrtc = _nvrtc()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), b"pti_kernel.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()] + [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\x00 ").decode(errors="replace")
        if int(err) != 0:
            raise PtiError(f"NVRTC could not compile the kernels for {arch}: {log.strip()}")
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return Compiled(cubin, log, arch, nvrtc_version(), resources=parse_resources(log))


def _hiprtc():
    try:
        from hip import hiprtc
    except ImportError:
        raise PtiError("hiprtc is not installed; install hip-python for your ROCm version") from None
    return hiprtc


def compile_hiprtc(source: str, arch: str) -> Compiled:
    """Compile `source` to a code object for `arch` ("gfx90a") through hip-python's hiprtc."""
    hiprtc = _hiprtc()
    prog = _check(hiprtc.hiprtcCreateProgram(source.encode(), b"pti_kernel.hip", 0, [], []),
                  "hiprtcCreateProgram")
    try:
        opts = [f"--offload-arch={arch}".encode(), b"-std=c++17", b"-O3"]
        (err,) = hiprtc.hiprtcCompileProgram(prog, len(opts), opts)
        size = _check(hiprtc.hiprtcGetProgramLogSize(prog), "hiprtcGetProgramLogSize")
        buf = bytearray(size)
        _check(hiprtc.hiprtcGetProgramLog(prog, buf), "hiprtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00 ").decode(errors="replace")
        if int(err) != 0:
            raise PtiError(f"hiprtc could not compile the kernels for {arch}: {log.strip()}")
        size = _check(hiprtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize")
        code = bytearray(size)
        _check(hiprtc.hiprtcGetCode(prog, code), "hiprtcGetCode")
    finally:
        hiprtc.hiprtcDestroyProgram(prog)
    return Compiled(bytes(code), log, arch, hiprtc_version())


def hiprtc_version() -> str:
    major, minor = _check(_hiprtc().hiprtcVersion(), "hiprtcVersion")
    return f"hiprtc {major}.{minor}"


def cache_path(kind: str, arch: str, name: str = "pti_kernel.hip") -> Path:
    """Where cached_binary keeps kernels/<name> for `arch`: named by a hash of (source, options,
    compiler, arch).  (scripts/device_cache.sh saves just these between device calls.)"""
    from ..default_model import cache_dir

    compiler = nvrtc_version() if kind == "cuda" else hiprtc_version()
    key = hashlib.sha256("\0".join([kernel_source(name), repr(NVRTC_OPTIONS), compiler, arch]).encode()).hexdigest()[:24]
    return cache_dir() / "kernels" / f"{Path(name).stem}_{kind}_{arch}_{key}.bin"


def cached_binary(kind: str, arch: str, name: str = "pti_kernel.hip") -> Compiled:
    """kernels/<name> for `arch`, compiled once per (source, options, compiler, arch)."""
    source = kernel_source(name)
    compiler = nvrtc_version() if kind == "cuda" else hiprtc_version()
    path = cache_path(kind, arch, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        return Compiled(path.read_bytes(), "", arch, compiler, cached=True)
    out = compile_nvrtc(source, arch) if kind == "cuda" else compile_hiprtc(source, arch)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(out.binary)
    os.replace(tmp, path)  # atomic: a concurrent start sees a whole file or none
    return out
