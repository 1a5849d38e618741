"""scripts/cluster_probe.py's analysis (the GPU part runs on the card): the GPCs found from which SMs share a
cluster, CTAs a SM over every SM, and working clusters a GPC, on made-up records of a card whose layout is known."""

from __future__ import annotations

import random

from script_helpers import load_script


def _script():
    return load_script("cluster_probe")


def _card(rng: random.Random):
    """A made-up card's GPCs: 3, of 4, 6 and 5 SMs, with shuffled SM numbers."""
    sms = list(range(15))
    rng.shuffle(sms)
    return [set(sms[:4]), set(sms[4:10]), set(sms[10:])]


def test_groups_are_the_gpcs_when_clusters_cover_them():
    cp, rng = _script(), random.Random()
    gpcs = _card(rng)
    records, cid = [], 0
    for g in gpcs:   # clusters of 2 chaining each GPC's SMs (as a full launch would cover them)
        ordered = sorted(g, key=lambda _: rng.random())
        for a, b in zip(ordered, ordered[1:]):
            records += [(a, cid, 0, cid), (b, cid, 1, cid)]
            cid += 1
    rng.shuffle(records)
    assert sorted(map(sorted, cp.gpc_groups(records, 2))) == sorted(map(sorted, gpcs))
    # without clusters nothing ties two SMs together
    assert len(cp.gpc_groups(records, 1)) == 15


def test_placement_and_working_clusters_per_gpc():
    cp = _script()
    groups = [{0, 1}, {2, 3}, {4, 5}]
    # clusters of 2 on 6 SMs: tickets 0-2 in GPC 0 and 1 (three deep on SM 0), ticket 3 in GPC 2; SM 5 empty
    records = [(0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 1), (1, 1, 1, 1), (2, 2, 0, 2), (3, 2, 1, 2),
               (4, 3, 0, 3), (0, 3, 1, 3)]
    p = cp.placement(records, 6)
    assert p["histogram"] == {0: 1, 1: 4, 4: 1} and p["idle_sms"] == 1 and p["most"] == 4
    assert abs(p["mean_over_most"] - 8 / 6 / 4) < 1e-12
    w = cp.placement(records, 6, working=3)   # only tickets 0-2
    assert w["histogram"] == {0: 2, 1: 3, 3: 1} and w["idle_sms"] == 2
    assert cp.per_gpc(records, groups) == [2, 1, 1] and cp.per_gpc(records, groups, working=3) == [2, 1, 0]


def test_pooled_launches_keep_their_clusters_apart():
    """Two launches each number their clusters from 0: pooled as they are, cluster 0 of one launch (GPC 0) and of
    the other (GPC 1) would join the two GPCs; pooled() keeps them apart, and the groups are still the GPCs."""
    cp, rng = _script(), random.Random()
    gpcs = [{0, 1, 2}, {3, 4, 5}]
    launches = []
    for first in (0, 1):   # launch i: cluster 0 in GPC i, cluster 1 in the other, each over all of its GPC's SMs
        recs = []
        for cid, g in enumerate((gpcs[first], gpcs[1 - first])):
            recs += [(sm, cid, r, cid) for r, sm in enumerate(sorted(g, key=lambda _: rng.random()))]
        launches.append(recs)
    assert len(cp.gpc_groups([r for recs in launches for r in recs], 3)) == 1   # the collision
    assert sorted(map(sorted, cp.gpc_groups(cp.pooled(launches), 3))) == sorted(map(sorted, gpcs))


def test_probe_kernel_compiles_for_hopper():
    """The probe's kernel (its PDL trigger and cluster registers need sm_90) compiles through NVRTC to a CUBIN,
    so that its device call does not fail at its first step (session 39's first call did, on a launch)."""
    from pti_cli.backends.compile import compile_nvrtc
    binary = compile_nvrtc(_script().SRC, "sm_90").binary
    assert binary[:4] == b"\x7fELF" and b"place" in binary


def test_parity_counts_ctas_and_mixed_sms():
    """parity(): CTAs on an SM of their rank's parity, and SMs that hold both parities (where a K-split pair's
    halves would share an SM's activation reads)."""
    cp, rng = _script(), random.Random()
    n = rng.randrange(4, 40)
    records = [(2 * i + r, i, r, i) for i in range(n) for r in (0, 1)]   # pairs on even/odd SMs: every CTA matches
    assert cp.parity(records) == {"ctas": 2 * n, "same": 2 * n, "mixed_sms": 0}
    records += [(0, n, 1, n), (5, n, 0, n)]   # rank 1 on SM 0, rank 0 on SM 5: two mismatches, two mixed SMs
    assert cp.parity(records) == {"ctas": 2 * n + 2, "same": 2 * n, "mixed_sms": 2}
