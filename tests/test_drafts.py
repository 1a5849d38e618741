"""N-gram lookup drafts: the incremental index against a brute-force rescan."""

from __future__ import annotations

import random

from pti_cli.drafts import MAX_N, DraftSizer, LookupIndex, propose


def brute_lookup(tokens: list[int], k: int, max_n: int = MAX_N) -> tuple[list[int], int]:
    """Rescan: longest suffix n-gram (n = max_n..1), latest earlier occurrence with a continuation."""
    L = len(tokens)
    for n in range(min(max_n, L), 0, -1):
        suffix = tokens[L - n:]
        for p in range(L - 1, n - 1, -1):  # p: position right after the occurrence
            if tokens[p - n:p] == suffix:
                return tokens[p:p + k], n
    return [], 0


def test_incremental_index_matches_rescan():
    rng = random.Random(1234)
    for trial in range(30):
        vocab = rng.choice([2, 3, 5, 20])
        idx = LookupIndex()
        toks: list[int] = []
        for step in range(rng.randint(1, 120)):
            t = rng.randrange(vocab)
            idx.append(t)
            toks.append(t)
            k = rng.randint(1, 16)
            assert idx.lookup(k) == brute_lookup(toks, k), (trial, step, toks)


def test_lookup_prefers_longest_then_latest():
    idx = LookupIndex()
    # "1 2 3 9" early, "7 3 5" later: suffix "2 3" matches the 2-gram at the start
    # even though the 1-gram "3" occurs more recently.
    idx.extend([1, 2, 3, 9, 9, 7, 3, 5, 1, 2, 3])
    assert idx.lookup(4) == ([9, 9, 7, 3], 3)
    idx2 = LookupIndex()
    idx2.extend([5, 1, 8, 5, 1, 6, 5, 1])  # "5 1" twice: the latest continuation (6) wins
    assert idx2.lookup(3) == ([6, 5, 1], 2)


def test_no_match_gives_no_draft():
    idx = LookupIndex()
    idx.extend([1, 2, 3, 4])
    assert idx.lookup(8) == ([], 0)
    assert propose(idx, DraftSizer(8), 8) == []


def test_propose_respects_k_limit_and_match_strength():
    idx = LookupIndex()
    base = list(range(100, 130))
    idx.extend(base + base[:5])  # suffix of 4 matches: 25 tokens of continuation known
    assert propose(idx, DraftSizer(8), 100) == base[5:13]
    assert propose(idx, DraftSizer(16), 100) == base[5:21]
    assert propose(idx, DraftSizer(16), 3) == base[5:8]
    assert propose(idx, DraftSizer(16), 0) == []
    weak = LookupIndex()
    weak.extend([4, 10, 11, 12, 13, 14, 4])  # only the 1-gram "4" matches
    assert propose(weak, DraftSizer(8), 100) == [10, 11]


def test_sizer_shrinks_on_rejection_and_grows_back():
    z = DraftSizer(8)
    assert z.size(4, 100) == 8
    z.update(drafted=8, accepted=0)
    assert z.size(4, 100) == 1
    z.update(drafted=1, accepted=1)
    assert z.size(4, 100) == 2
    z.update(drafted=2, accepted=2)
    z.update(drafted=4, accepted=4)
    assert z.size(4, 100) == 8
    z.update(drafted=8, accepted=3)
    assert z.size(4, 100) == 4
    assert z.size(4, 2) == 2  # never more than the match continues
