"""CudaOps: the non-matmul ops of a pass as kernels/pti_ops.hip kernels.

Same methods as `gpu_model.TorchOps`, so the model runs either.  Launches go
through cuda-python on the stream torch is using at that moment, so a whole
pass can be captured in a CUDA graph.  The source is compiled by NVRTC to a
CUBIN (backends/compile.py) and cached per source hash, compiler and arch.
"""

from __future__ import annotations

import ctypes
import math
import os
from typing import Any

import torch

from .backends.cuda import env_switch, launch_kernel, mm_carveout, set_carveout
from .errors import PtiError
from .gpu_model import ATTN_CHUNK, TorchOps, to_h16

P, I, L, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float


def ops_binary(arch: str, source: str = "pti_ops.hip") -> bytes:
    """The CUBIN of kernels/pti_ops.hip (or of another source path, for A/B runs) for `arch`
    (compiled once, cached like the matmuls')."""
    from .backends.compile import cached_binary
    return cached_binary("cuda", arch, source).binary


def _check(res, what: str):
    err, *rest = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise PtiError(f"CUDA {what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def host_device_ptr(t: torch.Tensor) -> int:
    """The device address of pinned host tensor t (the driver's: with unified addressing it is
    the host address, but that is the driver's to say), for kernels that write host memory."""
    from cuda.bindings import driver
    if not t.is_pinned():
        raise PtiError("a kernel can write host memory only where it is pinned")
    a = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_POINTER
    return int(_check(driver.cuPointerGetAttribute(a, t.data_ptr()), "device address of pinned memory"))


class _Module:
    """A loaded CUBIN and a launcher on torch's current stream."""

    def __init__(self, binary: bytes, names: list[str], pdl: bool = False, carveout: int | None = None):
        from cuda.bindings import driver
        self.driver = driver
        self.pdl = pdl   # programmatic dependent launch: every kernel of pti_ops.hip waits before its first access
        _check(driver.cuInit(0), "cuInit")
        self.mod = _check(driver.cuModuleLoadData(binary), "cuModuleLoadData")
        self.fn = {n: _check(driver.cuModuleGetFunction(self.mod, n.encode()), f"cuModuleGetFunction({n})")
                   for n in names}
        self.carveout = carveout   # preferred shared-memory carveout of every kernel (None: the driver's choice)
        if carveout is not None:
            for n, f in self.fn.items():
                set_carveout(driver, f, carveout, n)

    def blocks_per_sm(self, name: str, device: torch.device, threads: int = 256) -> int:
        """Blocks of `name` (`threads` threads, static shared memory only) that fit an SM at this
        module's carveout (without one: the most an SM has) and by its registers."""
        d, a = self.driver, self.driver.CUdevice_attribute
        dev = _check(d.cuDeviceGet(device.index or 0), "cuDeviceGet")
        most = _check(d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev), "attribute")
        reserved = _check(d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev), "attribute")
        static = _check(d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.fn[name]),
                        "attribute")
        avail = most if self.carveout is None else most * self.carveout // 100
        by_smem = avail // (static + reserved)
        by_regs = _check(self.driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.fn[name], threads, 0),
                         "occupancy")   # registers and threads (and the SM's whole shared memory)
        return min(by_smem, by_regs)

    def max_clusters(self, name: str, cl: int, threads: int = 256) -> int:
        """Clusters of cl blocks of `name` that the GPU holds at once: the driver's count, which
        knows each GPC's SMs (but not this module's carveout: see CudaOps._attention_fit)."""
        d = self.driver
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cl, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
        cfg.sharedMemBytes = 0
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cl, 1, 1
        cfg.attrs, cfg.numAttrs = [attr], 1
        return _check(d.cuOccupancyMaxActiveClusters(self.fn[name], cfg), f"cluster occupancy of {name}")

    def allow_large_clusters(self, prefix: str) -> None:
        """Clusters of more than 8 blocks (the portable most; 16 on the H100/H200) for the kernels
        named prefix*."""
        a = self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        for n, f in self.fn.items():
            if n.startswith(prefix):
                _check(self.driver.cuFuncSetAttribute(f, a, 1), f"cluster size attribute of {n}")

    def launch(self, name: str, grid: tuple, block: tuple, args: list[tuple[Any, Any]], cluster: int = 0) -> None:
        vals = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a, _ in args)
        types = tuple(t for _, t in args)
        stream = torch.cuda.current_stream().cuda_stream
        launch_kernel(self.driver, self.fn[name], grid, block, 0, stream, (vals, types), self.pdl, f"launch of {name}",
                      cluster)


GROUPS = (1, 2, 4, 8)     # attention kernels are instantiated for these query heads per KV head (>= the model's)
ATTN_THREADS = 256       # kernels/pti_ops.hip ATTN_THREADS
ARGMAX_THREADS, ARGMAX_CHUNK = 256, 2048   # kernels/pti_ops.hip ARGMAX_THREADS, ARGMAX_CHUNK
KERNELS = (["add_rmsnorm_bf16", "add_rmsnorm_f32", "rope_kv_bf16", "rope_kv_f32", "silu_mul_bf16", "silu_mul_f32",
            "attn_combine_64", "attn_combine_128", "stream_read", "embed_norm", "argmax_feed"]
           + [f"attn_{k}_{hd}_g{g}" for k in ("partial", "fused") for hd in (64, 128) for g in GROUPS]
           + [f"attn_rope_{k}{hd}_g{g}_{t}" for k in ("", "cl_", "cls_", "clp_") for hd in (64, 128) for g in GROUPS
              for t in ("bf16", "f32")])


ATTN_CLUSTER_MAX = 16        # blocks per cluster of the fused attention (above 8: a non-portable size)
ATTN_WIDE_CLUSTER_MAX = 16   # the same for grids that do not fit the pinned carveout


def _cluster_setting(var: str, default: int) -> int:
    v = os.environ.get(var, "")
    if not v:
        return default
    if not v.isdigit() or int(v) > 16:
        raise PtiError(f"{var} must be 0-16, not {v!r}")
    return int(v)


def attn_cluster_max() -> int:
    """ATTN_CLUSTER_MAX, or PTI_ATTN_CLUSTER (0: no clusters, the atomic-counter combine; 1-16)
    for A/B runs."""
    return _cluster_setting("PTI_ATTN_CLUSTER", ATTN_CLUSTER_MAX)


def attn_wide_cluster_max() -> int:
    """ATTN_WIDE_CLUSTER_MAX, or PTI_ATTN_WIDE_CL (0: the counter form for every grid that does not
    fit the pinned carveout; 1-16) for A/B runs."""
    return _cluster_setting("PTI_ATTN_WIDE_CL", ATTN_WIDE_CLUSTER_MAX)


def attn_push() -> bool:
    """Whether cluster launches of one chunk a block push their partials into the combining blocks'
    shared memory (attn_rope_clp_*; the default) or leave them in L2 (attn_rope_cl_*): PTI_ATTN_PUSH=0
    for A/B runs.  The same bits either way."""
    return env_switch("PTI_ATTN_PUSH")


def attn_tiles() -> bool:
    """PTI_ATTN_TILES (default 1): the fused attention also lays out its rows in the tiles of the Hopper matmul
    after it (AttnOut), so that no pti_wg_tiles launch sits between them: twins ab +1.8% / +1.4% at 24 / 32
    sequences on the H200 (docs/perf.md, session 37).  0: a pti_wg_tiles launch before O, for A/B runs."""
    return env_switch("PTI_ATTN_TILES")


def attention_cluster(n_chunks: int, groups: int, cluster_max: int, pinned: list[int], wide_max: int = 0,
                      wide: list[int] | None = None) -> tuple[int, bool]:
    """(blocks per cluster, wide) of the fused attention for `groups` (row, KV head) pairs of
    n_chunks KV chunks each; (0, False) for the atomic-counter form (kernels/pti_ops.hip,
    attn_rope; the same bits either way).  pinned[cl] / wide[cl]: clusters of cl blocks that the
    GPU holds at once at the pinned carveout / the driver's (CudaOps.k, k_wide).

    Clusters only when every cluster of the grid is resident at once: a cluster's blocks hold
    their SMs until its last chunk is done, so grids of several waves of clusters lose (16
    sequences, clusters of 11: 18 -> 27 us a launch; docs/perf.md, session 12).  First a block
    per chunk (up to cluster_max) at the pinned carveout; else, up to wide_max blocks a cluster at
    the driver's carveout, each block taking every cl-th chunk: the fewest rounds of chunks that
    fit, with the fewest blocks that give them (docs/perf.md, session 13)."""
    if not cluster_max:
        return 0, False
    cl = min(n_chunks, cluster_max)
    if pinned[cl] >= groups:
        return cl, False
    wide = wide or []
    fitting = [c for c in range(2, min(n_chunks, wide_max, len(wide) - 1) + 1) if wide[c] >= groups]
    if not fitting:
        return 0, False
    rounds = -(-n_chunks // max(fitting))
    return min(c for c in fitting if -(-n_chunks // c) == rounds), True


def _suffix(t: torch.Tensor) -> str:
    if t.dtype == torch.bfloat16:
        return "bf16"
    if t.dtype == torch.float32:
        return "f32"
    raise PtiError(f"pti_ops kernels take bf16 or float32 matmul outputs, not {t.dtype}")


def attn_tile_args(to: list | None, n_a: int, M: int, W: int) -> list:
    """The fused attention's last four arguments (AttnOut's ta, tb, na, tnr) for output rows of width W laid
    out in the tiles `to` (one tensor a twin with rows, twin A's n_a rows first where there are two; None:
    no tiles), checked, since the kernel writes them unchecked."""
    if not to:
        return [(0, P), (0, P), (M, I), (0, I)]
    rows = [n_a, M - n_a] if len(to) == 2 else [M]
    if len(to) > 2 or W % 256 or any(t.numel() % (8 * W) or t.numel() // W < r for t, r in zip(to, rows)):
        raise PtiError(f"the attention cannot lay out {M} rows of {W} in tiles of {[t.numel() for t in to]}")
    return [(to[0], P), (to[1] if len(to) == 2 else 0, P), (n_a if len(to) == 2 else M, I), (to[0].numel() // W, I)]


class CudaOps:
    name = "cuda"

    def __init__(self, device: torch.device, source: str = "pti_ops.hip"):
        torch.zeros(1, device=device)  # make torch's context current before the module loads
        major, minor = torch.cuda.get_device_capability(device)
        self.device = device
        binary, pdl = ops_binary(f"sm_{major}{minor}", source), major >= 9 and os.environ.get("PTI_PDL", "1") != "0"
        # Every kernel asks for the matmuls' shared-memory carveout, so that a pass keeps one SM
        # configuration (one sequence -0.5%, two twins -0.4%: docs/perf.md, session 11).  At that
        # carveout the attention fits 2 blocks per SM, too few for wide grids (16 sequences +2%):
        # those launch from a second load of the module, left to the driver (4 blocks per SM).
        carveout = mm_carveout()
        self.k = _Module(binary, KERNELS, pdl, carveout)
        self.k_wide = _Module(binary, [n for n in KERNELS if n.startswith("attn_rope_")], pdl) \
            if carveout is not None else self.k
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        # The fused attention combines its chunks within a thread-block cluster on sm_90+ (one
        # barrier, the combine spread over the cluster); elsewhere through an atomic counter.
        self.cluster_max = attn_cluster_max() if major >= 9 and torch.version.hip is None else 0
        self.wide_cluster_max = attn_wide_cluster_max() if self.cluster_max else 0
        self.push = attn_push()
        # the argmax kernel writes each pass's picks to the host ring itself (GpuModel._launch),
        # instead of a copy after the pass (docs/perf.md, session 20); PTI_HOST_RING=0 copies them
        # (A/B runs)
        self.writes_host_ring = env_switch("PTI_HOST_RING")
        if self.cluster_max > 8 or self.wide_cluster_max > 8:
            self.k.allow_large_clusters("attn_rope_cl")   # attn_rope_cl_*, attn_rope_cls_*, attn_rope_clp_*
            if self.k_wide is not self.k:
                self.k_wide.allow_large_clusters("attn_rope_cl")
        # per attention kernel: blocks per GPU at the pinned carveout (the counter form), and
        # clusters per GPU by size at the pinned and the driver's carveout (attention_cluster)
        self._fit: dict[str, tuple[int, list[int], list[int]]] = {}
        self.sink = torch.zeros(4, dtype=torch.int32, device=device)
        self.fused_attention = True   # one attention launch: the last chunk block combines
        self.fused_rope = True        # RoPE and the KV write inside that launch (implies fused_attention)
        self.attn_tiles = attn_tiles()   # the attention's rows also in the output matrix's tiles
        self.counters = torch.zeros(1 << 16, dtype=torch.int32, device=device)
        self._old: list[torch.Tensor] = []   # outgrown counters: captured graphs may still use them

    def add_norm(self, x: torch.Tensor, r: torch.Tensor | None, w: torch.Tensor, eps: float, dtype,
                 n_a: int | None = None) -> torch.Tensor:
        """w: [d], or [2, d] per twin (the first n_a rows are twin A's)."""
        M, d = x.shape
        if d > 256 * 24:
            raise PtiError(f"the norm kernel takes rows of at most 6144 elements, not {d}")
        h = torch.empty((M, d), dtype=torch.bfloat16, device=x.device)
        suf = _suffix(r) if r is not None else "bf16"
        wa, wb = (w[0], w[1]) if w.dim() == 2 else (w, w)
        self.k.launch(f"add_rmsnorm_{suf}", (M,), (1024,),
                      [(x, P), (r.contiguous() if r is not None else 0, P), (wa, P), (wb, P),
                       (M if n_a is None or w.dim() == 1 else n_a, I), (h, P), (d, I), (eps, F)])
        return h

    def rope_kv(self, m, qkv: torch.Tensor, pos, slot, layer: int) -> torch.Tensor:
        if self.fused_rope:   # done inside the attention launch, straight from qkv
            return qkv
        sh, M = m.shape, qkv.shape[0]
        q = torch.empty((M, sh.n_heads * sh.head_dim), dtype=torch.bfloat16, device=qkv.device)
        self.k.launch(f"rope_kv_{_suffix(qkv)}", (sh.n_heads + 2 * sh.n_kv_heads, M), (sh.head_dim // 2,),
                      [(qkv.contiguous(), P), (pos, P), (slot, P), (m.cos, P), (m.sin, P), (q, P),
                       (m.kcache[layer], P), (m.vcache[layer], P), (sh.n_heads, I), (sh.n_kv_heads, I),
                       (sh.head_dim, I), (m.max_ctx + 1, I), (int(sh.rope_neox), I)])
        return q

    @property
    def writes_tiles(self) -> bool:
        """Whether the pass asks attention() to lay out its rows in the Hopper matmul's tiles (the fused
        RoPE form can; PTI_ATTN_TILES=1)."""
        return self.fused_rope and self.attn_tiles

    def attention(self, m, q: torch.Tensor, pos, slot, layer: int, S: int, Pr: int, h16: bool = False,
                  to: list | None = None, n_a: int = 0) -> torch.Tensor:
        """TorchOps.attention's rows (bf16, or h16: written so by the fused kernels).  to (the fused RoPE form):
        the output matrix's input tiles (KernelLinear.input_tiles: one tensor a twin with rows, the first
        twin's n_a rows into to[0] when there are two), which the kernel also writes (AttnOut)."""
        sh, M = m.shape, q.shape[0]
        hd, H = sh.head_dim, sh.n_heads
        if to and not self.fused_rope:
            raise PtiError("only the fused RoPE attention lays out its rows in tiles")
        if hd not in (64, 128) or H // sh.n_kv_heads > GROUPS[-1]:
            raise PtiError("the attention kernel takes head size 64 or 128 and <= 8 query heads per KV head")
        ng = next(g for g in GROUPS if g >= H // sh.n_kv_heads)
        # KV chunks in the grid and in the partials' stride: those the rows can reach (m.attn_bound,
        # eager passes), else the whole context.  Blocks past a row's position do nothing, so
        # leaving them out changes no bits.
        nch = math.ceil(min(m.max_ctx + 1, m.attn_bound or m.max_ctx + 1) / ATTN_CHUNK)
        acc = torch.empty(M * H * nch * hd, dtype=torch.float32, device=q.device)
        ml = torch.empty(M * H * nch * 2, dtype=torch.float32, device=q.device)
        out = torch.empty((M, H * hd), dtype=torch.bfloat16, device=q.device)
        args = [(q, P), (m.kcache[layer], P), (m.vcache[layer], P), (pos, P), (slot, P), (acc, P),
                (ml, P), (H, I), (sh.n_kv_heads, I), (m.max_ctx + 1, I), (nch, I), (1.0 / math.sqrt(hd), F)]
        if self.fused_attention or self.fused_rope:
            if self.counters.numel() < M * sh.n_kv_heads:   # zeros; each launch leaves them zero
                self._old.append(self.counters)
                self.counters = torch.zeros(M * sh.n_kv_heads, dtype=torch.int32, device=q.device)
        if self.fused_rope:   # q is the matmul's qkv
            out = out.view(torch.float16) if h16 else out   # (AttnOut in pti_ops.hip)
            early = int(torch.cuda.is_current_stream_capturing())   # see attn_rope in pti_ops.hip
            name = f"attn_rope_{hd}_g{ng}_{_suffix(q)}"
            fit, cl, on_wide = self.attention_form(name, nch, sh.n_kv_heads * M)
            common = [(q.contiguous(), P), (pos, P), (slot, P), (m.cos, P), (m.sin, P), (m.kcache[layer], P),
                      (m.vcache[layer], P), (acc, P), (ml, P)]
            tail = [(H, I), (sh.n_kv_heads, I), (m.max_ctx + 1, I), (nch, I), (1.0 / math.sqrt(hd), F), (Pr, I),
                    (int(sh.rope_neox), I), (early, I)]
            tiles = attn_tile_args(to, n_a, M, H * hd)
            if cl:
                # blocks of several chunks may combine through shared memory (cls); blocks of one push
                # their partials to the combining blocks (clp), or leave them in L2 (cl)
                form = "cls" if cl < nch else "clp" if self.push else "cl"
                (self.k_wide if on_wide else self.k).launch(
                    f"attn_rope_{form}_{hd}_g{ng}_{_suffix(q)}", (cl, sh.n_kv_heads, M), (ATTN_THREADS,),
                    common + [(out, P)] + tail + [(cl, I), (int(h16), I)] + tiles, cluster=cl)
                return out
            mod = self.k if nch * sh.n_kv_heads * M <= fit else self.k_wide
            mod.launch(name, (nch, sh.n_kv_heads, M), (ATTN_THREADS,),
                       common + [(self.counters, P), (out, P)] + tail + [(int(h16), I)] + tiles)
            return out
        if self.fused_attention:
            self.k.launch(f"attn_fused_{hd}_g{ng}", (nch, sh.n_kv_heads, M), (ATTN_THREADS,),
                          args + [(self.counters, P), (out, P)])
            return to_h16(out) if h16 else out
        self.k.launch(f"attn_partial_{hd}_g{ng}", (nch, sh.n_kv_heads, M), (ATTN_THREADS,),
                      [(q, P), (m.kcache[layer], P), (m.vcache[layer], P), (pos, P), (slot, P), (acc, P),
                       (ml, P), (H, I), (sh.n_kv_heads, I), (m.max_ctx + 1, I), (nch, I),
                       (1.0 / math.sqrt(hd), F)])
        self.k.launch(f"attn_combine_{hd}", (H, M), (hd,), [(acc, P), (ml, P), (pos, P), (out, P), (H, I), (nch, I)])
        return to_h16(out) if h16 else out

    def attention_form(self, name: str, n_chunks: int, groups: int) -> tuple[int, int, bool]:
        """(blocks of `name` that fit the GPU at the pinned carveout, blocks per cluster, wide) of a
        fused attention launch over n_chunks chunks for `groups` (row, KV head) pairs
        (attention_cluster; cluster size 0: the counter form)."""
        if name not in self._fit:
            self._fit[name] = self._attention_fit(name, name.replace("attn_rope_", "attn_rope_cl_"))
        fit, pinned, wide = self._fit[name]
        return (fit, *attention_cluster(n_chunks, groups, self.cluster_max, pinned, self.wide_cluster_max, wide))

    def _attention_fit(self, name: str, cl_name: str) -> tuple[int, list[int], list[int]]:
        fit = self.k.blocks_per_sm(name, self.device, ATTN_THREADS) * self.sms
        top = 16 if max(self.cluster_max, self.wide_cluster_max) > 8 else 8 if self.cluster_max else 0
        tables = []
        # any of the three may be launched (whatever PTI_ATTN_PUSH says): the smallest fit counts
        forms = [cl_name] + [cl_name.replace("attn_rope_cl_", f"attn_rope_{f}_") for f in ("cls", "clp")]
        for mod in (self.k, self.k_wide):   # the driver's count, bounded by the blocks this carveout fits
            blocks = min(mod.blocks_per_sm(n, self.device, ATTN_THREADS) for n in forms) * self.sms
            tables.append([0] + [min([mod.max_clusters(n, c, ATTN_THREADS) for n in forms] + [blocks // c])
                                 if c <= top else 0 for c in range(1, 17)])
        return fit, tables[0], tables[1]

    def silu_mul(self, gu: torch.Tensor, ffn: int) -> torch.Tensor:
        M = gu.shape[0]
        out = torch.empty((M, ffn), dtype=torch.bfloat16, device=gu.device)
        total = M * ffn
        grid = min((total + 255) // 256, 132 * 16)
        self.k.launch(f"silu_mul_{_suffix(gu)}", (grid,), (256,), [(gu.contiguous(), P), (out, P), (ffn, I), (total, L)])
        return out

    def embed(self, E: torch.Tensor, tokens: torch.Tensor, n_a: int) -> torch.Tensor:
        """float32 rows of the embedding table E ([vocab, d], or [2, vocab, d] per twin)."""
        if E.dtype != torch.bfloat16 or not E.is_contiguous():
            return TorchOps().embed(E, tokens, n_a)
        return self._embed_norm(E, tokens, None, n_a, None, None)[0]

    def norm_parts(self, x: torch.Tensor, g: torch.Tensor, n_a: int, dtype):
        """(u, p) of the first layer's norm (gpu_model.norm_parts; dtype float16: u in h16), one launch."""
        if dtype not in (torch.bfloat16, torch.float16) or not x.is_contiguous():
            return TorchOps().norm_parts(x, g, n_a, dtype)
        return self._embed_norm(None, None, x, n_a, g, dtype)[1:]

    def embed_norm(self, E: torch.Tensor, tokens: torch.Tensor, n_a: int, g: torch.Tensor, dtype):
        """(x, u, p): embed, then norm_parts, in one launch (the pass's first)."""
        if E.dtype != torch.bfloat16 or not E.is_contiguous() or dtype not in (torch.bfloat16, torch.float16):
            return TorchOps().embed_norm(E, tokens, n_a, g, dtype)
        return self._embed_norm(E, tokens, None, n_a, g, dtype)

    def _embed_norm(self, E, tokens, x, n_a: int, g, dtype):
        """kernels/pti_ops.hip embed_norm: x from E's rows (tokens) or given; u, p when g is given.
        Rows below n_a are twin A's (E[0], g[0]) where E or g has one per twin."""
        if x is None:
            M, (vocab, d) = tokens.shape[0], E.shape[-2:]
            x = torch.empty((M, d), dtype=torch.float32, device=E.device)
            Ea, Eb = (E[0], E[1]) if E.dim() == 3 else (E, E)
        else:
            (M, d), vocab, Ea, Eb, tokens = x.shape, 0, None, None, None
        u = p = ga = gb = None
        if g is not None:
            u = torch.empty((M, d), dtype=dtype, device=x.device)
            p = torch.empty((M, -(-d // 16)), dtype=torch.float32, device=x.device)
            ga, gb = (g[0], g[1]) if g.dim() == 2 else (g, g)
        ptr = (lambda t: t if t is not None else 0)   # noqa: E731
        self.k.launch("embed_norm", (M,), (256,), [(ptr(Ea), P), (ptr(Eb), P), (ptr(tokens), P), (n_a, I),
                                                   (vocab, I), (d, I), (x, P), (ptr(ga), P), (ptr(gb), P),
                                                   (ptr(u), P), (ptr(p), P), (int(dtype == torch.float16), I)])
        return x, u, p

    def argmax_state(self, M: int, V: int) -> torch.Tensor:
        """The argmax kernel's counters and per-block bests for M rows of V logits (zero: each
        launch leaves its counters so), kept with a bucket so that a pass allocates nothing."""
        return torch.zeros(2 + M + 2 * M * -(-V // ARGMAX_CHUNK), dtype=torch.int32, device=self.device)

    def argmax_feed(self, logits: torch.Tensor, feed: torch.Tensor | None, state: torch.Tensor | None = None,
                    host: torch.Tensor | None = None) -> torch.Tensor:
        """int32 argmax of each row (lowest id on ties, NaN first, as torch.argmax); feed: see
        TorchOps.argmax_feed (one kernel does both).  state: argmax_state(M, V) (None: a new one).
        host: pinned int32 [RING, M]: the picks also go to its row state[0] (written by the kernel
        through its device address), which then advances."""
        if logits.dtype != torch.float32 or not logits.is_contiguous():
            if host is not None:
                raise PtiError("the picks' host ring needs the argmax kernel (float32 contiguous logits)")
            return TorchOps().argmax_feed(logits, feed)
        M, V = logits.shape
        if state is None:
            state = self.argmax_state(M, V)
        if state.numel() < 2 + M + 2 * M * -(-V // ARGMAX_CHUNK):
            raise PtiError(f"the argmax state holds {state.numel()} values, too few for {M} x {V} logits")
        ids = torch.empty(M, dtype=torch.int32, device=logits.device)
        self.k.launch("argmax_feed", (-(-V // ARGMAX_CHUNK), M), (ARGMAX_THREADS,),
                      [(logits, P), (V, I), (M, I), (ids, P), (feed if feed is not None else 0, P),
                       (host_device_ptr(host) if host is not None else 0, P),
                       (host.shape[0] if host is not None else 1, I), (state, P)])
        return ids

    def stream_read(self, buf: torch.Tensor) -> None:
        n16 = buf.numel() * buf.element_size() // 16
        self.k.launch("stream_read", (132 * 8,), (512,), [(buf, P), (n16, L), (self.sink, P)])


def kernel_backend(device: torch.device):
    """The kernels backend (backends/cuda.py) for the matmuls."""
    from .backends.cuda import CudaBackend
    return CudaBackend(device)
