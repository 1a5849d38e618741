#!/usr/bin/env python3
"""Where does the card put a launch's thread-block clusters?  Session 38's ncu found the narrow matrices'
clusters of 8 (256 CTAs, room for three a SM) on 0-3 CTAs a SM, the average SM busy 73% of the busiest's.
This probe launches a kernel with the same CTA shape (256 threads, the shared memory of the form it stands for),
holds every CTA for a while so that the launch's CTAs are all resident together, as a matmul's are, and records
each CTA's SM (%smid), cluster and rank.  Configurations:
- the model's launches: 32 clusters of 8 at m4_c8's and m8_c8's shared memory (three and two CTAs a SM), 64 of 4
  at m2_c4's, 256 plain CTAs (the fixup form), and the first with each cluster scheduling policy;
- tickets: as many clusters of 8 as the card holds at once, of which only the first 32 to take a ticket from a
  global counter count as working (the placement a launch sized to the card would give its work);
- split (the rest form, session 40's PTI_WG_REST32): the clusters of 8 the card holds at two CTAs a SM
  (WG_SMEM_TWO), and 16 plain CTAs launched after them on the same stream with programmatic dependent launch, as
  launch_wg does (each CTA triggers its dependents first), to see whether the 16 take the slots the clusters left.
Per configuration: CTAs a SM (a histogram over all SMs), the mean over the most (a matmul's SM time is set by its
busiest SM), and how many working clusters each GPC got, the GPCs found from which SMs share a cluster (a
cluster's CTAs sit in one GPC).
    python3 scripts/cluster_probe.py [--json OUT.json]"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SRC = r'''
typedef unsigned long long u64;
__device__ __forceinline__ u64 now() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
// rec[4 b + 0..3] = SM, cluster, rank, ticket (ticket: rank 0's, taken when tick != 0; else the cluster's index)
extern "C" __global__ void place(unsigned* rec, unsigned* tick, u64 ns) {
    __shared__ unsigned t;
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");   // (a launch after it with PDL may start)
    unsigned sm, cid, rank, nc;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nc));
    if (threadIdx.x == 0) t = (tick != nullptr && rank == 0) ? atomicAdd(tick, 1u) : cid;
    __syncthreads();
    if (nc > 1) {   // rank 0's ticket to the cluster over distributed shared memory
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
        unsigned a, v;
        asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(a) : "r"((unsigned)__cvta_generic_to_shared(&t)));
        asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
        asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
        if (threadIdx.x == 0) t = v;
    }
    if (threadIdx.x == 0) {
        const u64 s = now();
        while (now() < s + ns) {}
        const unsigned b = blockIdx.x;
        rec[4 * b] = sm; rec[4 * b + 1] = cid; rec[4 * b + 2] = rank; rec[4 * b + 3] = t;
    }
}
'''


def gpc_groups(records: list[tuple[int, int, int, int]], cluster: int) -> list[set[int]]:
    """The SMs that share a cluster with each other, transitively (union-find): a cluster's CTAs sit in one GPC, so
    each group lies in one GPC (a full launch shows each GPC whole).  records: (sm, cluster, rank, ticket)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    by_cluster: dict[int, list[int]] = {}
    for sm, cid, _, _ in records:
        find(sm)
        if cluster > 1:
            by_cluster.setdefault(cid, []).append(sm)
    for sms in by_cluster.values():
        for sm in sms[1:]:
            parent[find(sm)] = find(sms[0])
    groups: dict[int, set[int]] = {}
    for sm in parent:
        groups.setdefault(find(sm), set()).add(sm)
    return sorted(groups.values(), key=lambda g: min(g))


def placement(records: list[tuple[int, int, int, int]], sm_count: int, working: int | None = None) -> dict:
    """CTAs a SM over all sm_count SMs (the working clusters' only: ticket < working, when given), as a histogram
    {CTAs: SMs}, the mean over the most, and the SMs with none."""
    per_sm = Counter(sm for sm, _, _, ticket in records if working is None or ticket < working)
    counts = [per_sm.get(sm, 0) for sm in range(sm_count)]
    most = max(counts)
    return {"histogram": dict(sorted(Counter(counts).items())), "mean_over_most": sum(counts) / sm_count / most if most else 0.0,
            "idle_sms": counts.count(0), "most": most}


def pooled(runs: list[list[tuple[int, int, int, int]]]) -> list[tuple[int, int, int, int]]:
    """Several launches' records as one list, each launch's cluster indices made distinct: the same index in two
    launches is two clusters (pooled as they were, session 39's first run on the card joined every GPC into one)."""
    return [(sm, (i << 20) + cid, rank, t) for i, recs in enumerate(runs) for sm, cid, rank, t in recs]


def per_gpc(records: list[tuple[int, int, int, int]], groups: list[set[int]], working: int | None = None) -> list[int]:
    """Working clusters (rank 0's SM) in each group of gpc_groups."""
    where = {sm: i for i, g in enumerate(groups) for sm in g}
    out = [0] * len(groups)
    for sm, _, rank, ticket in records:
        if rank == 0 and (working is None or ticket < working) and sm in where:
            out[where[sm]] += 1
    return out


def parity(records: list[tuple[int, int, int, int]]) -> dict:
    """How many CTAs sit on an SM whose index has their cluster rank's parity, and how many SMs hold CTAs of both
    rank parities: the K-split pairs (pti_mm_tc KS = 2) halve each SM's activation bytes only where none does."""
    ranks: dict[int, set[int]] = {}
    for sm, _, rank, _ in records:
        ranks.setdefault(sm, set()).add(rank % 2)
    return {"ctas": len(records), "same": sum(sm % 2 == rank % 2 for sm, _, rank, _ in records),
            "mixed_sms": sum(len(r) > 1 for r in ranks.values())}


def main() -> None:
    import torch
    from cuda.bindings import driver

    from pti_cli.backends import cuda
    from pti_cli.backends.compile import compile_nvrtc
    from pti_cli.errors import PtiError
    # the forms' dynamic shared memory, which sets their CTAs a SM (m4_c8 three, m8_c8 two, m2_c4 three)
    smem = {v[1]: cuda.wg_smem(*v[2:6]) for v in cuda.WG_VARIANTS["n"] + (cuda.WG_TWIN_FORM,)}
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write every configuration's records and summary here")
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        sys.exit("cluster_probe: thread-block clusters need sm_90 or newer")
    cuda._cu(driver.cuInit(0), "cuInit")
    mod = cuda._cu(driver.cuModuleLoadData(compile_nvrtc(SRC, f"sm_{major}{minor}").binary), "load")
    f = cuda._cu(driver.cuModuleGetFunction(mod, b"place"), "place")
    cuda._cu(driver.cuFuncSetAttribute(f, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       110 * 1024), "shared memory")
    # all of the SM's shared memory, as the Hopper kernels ask (CudaBackend._load_wg).  Left to the driver, a launch
    # of few CTAs may get a smaller carveout that cannot share an SM with the clusters' CTAs: the likely cause of
    # session 40's first split row, where 8 of the 16 CTAs ran only after the clusters ended (a third CTA on 8 SMs)
    cuda.set_carveout(driver, f, 100, "place")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    P, U = ctypes.c_void_p, ctypes.c_uint64

    def resident(c: int, smem: int) -> int:
        cfg = cuda.launch_config(driver, (64 * c,), (256,), smem, 0, False, c)
        return cuda._cu(driver.cuOccupancyMaxActiveClusters(f, cfg), "max active clusters")

    def start(clusters: int, c: int, smem: int, tickets: bool, policy: int = 0, pdl: bool = False) -> torch.Tensor:
        """Launch `clusters` clusters of c CTAs; their records' tensor, filled once the stream is done."""
        ctas = clusters * max(c, 1)
        rec = torch.full((ctas * 4,), -1, dtype=torch.int32, device="cuda")
        tick = torch.zeros(1, dtype=torch.int32, device="cuda")
        cfg = cuda.launch_config(driver, (ctas,), (256,), smem, torch.cuda.current_stream().cuda_stream, pdl,
                                 c if c > 1 else 0)
        if policy:   # CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE (1 spread, 2 load balancing)
            dim = driver.CUlaunchAttribute()
            dim.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            dim.value.clusterDim.x, dim.value.clusterDim.y, dim.value.clusterDim.z = c, 1, 1
            attr = driver.CUlaunchAttribute()
            attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
            attr.value.clusterSchedulingPolicyPreference = driver.CUclusterSchedulingPolicy(policy)
            cfg.attrs = [dim, attr]
            cfg.numAttrs = 2
        args = ((rec.data_ptr(), tick.data_ptr() if tickets else 0, 200_000), (P, P, U))
        cuda._cu(driver.cuLaunchKernelEx(cfg, f, args, 0), "launch place")
        return rec

    def records(rec: torch.Tensor) -> list[tuple[int, int, int, int]]:
        torch.cuda.synchronize()
        r = rec.view(-1, 4).cpu().tolist()
        if any(v < 0 for row in r for v in row):
            raise SystemExit("cluster_probe: a CTA wrote no record")
        return [tuple(row) for row in r]

    def launch(clusters: int, c: int, smem: int, tickets: bool, policy: int = 0, rest: int = 0) -> list[tuple[int, int, int, int]]:
        """One launch's records; rest > 0: and `rest` plain CTAs launched after it with PDL, at the same shared
        memory (the rest form), their cluster indices put far above any launch's (pooled adds i << 20)."""
        first = start(clusters, c, smem, tickets, policy)
        second = start(rest, 1, smem, False, 0, True) if rest else None
        return records(first) + ([(sm, (1 << 30) + cid, r, t) for sm, cid, r, t in records(second)] if rest else [])

    full = resident(8, smem["m4_c8"])
    configs = [("m4_c8: 32 clusters of 8", 32, 8, smem["m4_c8"], False, 0, None),
               ("the same, policy spread", 32, 8, smem["m4_c8"], False, 1, None),
               ("the same, policy load balancing", 32, 8, smem["m4_c8"], False, 2, None),
               (f"m8_c8: 32 clusters of 8 ({resident(8, smem['m8_c8'])} fit)", 32, 8, smem["m8_c8"], False, 0, None),
               ("m2_c4 (two twins): 64 clusters of 4", 64, 4, smem["m2_c4"], False, 0, None),
               ("pairs (the K-split pairs, session 51): 128 clusters of 2 at two CTAs a SM", 128, 2, cuda.WG_SMEM_TWO,
                False, 0, None),
               ("plain: 256 CTAs at m4_c8's shared memory (the fixup form)", 256, 1, smem["m4_c8"], False, 0, None),
               (f"tickets: {full} clusters of 8 (all that fit), the first 32 working", full, 8, smem["m4_c8"], True, 0, 32)]
    two = resident(8, cuda.WG_SMEM_TWO)
    split = (f"split: {two} clusters of 8 at two CTAs a SM, then {8 * (32 - two)} plain CTAs with PDL", two, 8,
             cuda.WG_SMEM_TWO, False, 0, None, 8 * (32 - two))
    print(f"{full} clusters of 8 fit at m4_c8's shared memory ({smem['m4_c8']} bytes)", flush=True)
    runs = []
    for name, n, c, sm_bytes, tickets, policy, working, *rest in configs + ([split] if two < 32 else []):
        try:   # one configuration's failure (a launch attribute this driver refuses) does not lose the others
            runs.append((name, launch(n, c, sm_bytes, tickets, policy, *rest), c, working))
        except PtiError as e:
            print(f"  {name}: {e}", flush=True)
    groups = gpc_groups(pooled([recs for _, recs, c, _ in runs if c == 8]), 8)
    print(f"{torch.cuda.get_device_name(0)}: {sms} SMs; {full} clusters of 8 fit at m4_c8's shared memory; SM groups "
          f"sharing clusters (GPCs): {len(groups)}, of {sorted(len(g) for g in groups)} SMs")
    out = {"device": torch.cuda.get_device_name(0), "sms": sms, "resident_c8": full, "groups": [sorted(g) for g in groups],
           "configs": []}
    for name, recs, c, working in runs:
        p = placement(recs, sms, working)
        gp = per_gpc(recs, groups, working) if c > 1 else []
        par = parity(recs) if c > 1 else None
        print(f"  {name}: CTAs a SM {p['histogram']}, mean / most {p['mean_over_most']:.2f}, idle SMs {p['idle_sms']}"
              + (f", working clusters a GPC {gp}" if gp else "")
              + (f"; rank parity = SM parity for {par['same']} of {par['ctas']} CTAs, SMs holding both parities "
                 f"{par['mixed_sms']}" if par else ""))
        out["configs"].append({"name": name, "cluster": c, "working": working, "records": recs, **p, "per_gpc": gp,
                               "parity": par})
    if args.json:
        args.json.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
