"""The llama / qwen2 / qwen3 forward over a batch of sequences: one call = one pass.

    model = Model(SSQFile(path), load_backend("torch"), twins="a")
    kv = model.new_kv()
    logits = model.forward([(kv, 0, prompt_ids)])      # float32 [len(prompt_ids), vocab]
    logits = model.forward([(kv, 0, [next_id]), (kv2, 0, [a, b, c])])   # 4 rows, one pass
    logits = model.forward([(kv, 0, prompt_ids)], logit_tail=[1])   # [1, vocab]: the last row only

`forward(batch)`, batch = list of (kv: KVCache, twin: 0|1, tokens: list[int]):
every sequence's new tokens are appended at positions kv.length ..; all rows of
all sequences go through each weight matrix together (rows of twin A first,
then twin B, through `backend.matmul_twins` when both are present); attention
runs per sequence over its cache, its new rows seeing each other causally.
Returns logits, one row per token, in batch order; each kv.length grows by its
number of tokens.  To drop rejected draft positions: kv.truncate(n).
`logit_tail` (one int per batch item) asks for logits of only the last
`logit_tail[i]` rows of item i (0..len(tokens)): the result is then those rows,
item by item in batch order, [sum(logit_tail), vocab].  The output matrix
(vocab x hidden) is the largest of the model: a prefill needs just its last row.

Prefill: a sequence whose cache is empty at the start of the pass (its first
pass: the engine sends the whole prompt, no draft) gets ONE causal attention
over its rows (scaled_dot_product_attention), not a loop per row.  Its bits
depend only on the prompt (the call shape is set by its length), so every
configuration that prefills a prompt in one pass computes it identically; rows
of a sequence with a non-empty cache (decode, drafts) take the per-row path.

Batch invariance (a row's logits never depend on the other rows of the pass):
the matmuls are the backend's (batch-invariant by contract); norms, RoPE and
the MLP's activation are per row; attention is computed per sequence: row by
row, with shapes that depend only on the row's own position, or for a prefill
once over the whole prompt (shapes set by the prompt alone).

RoPE: llama GGUFs store Q/K rows permuted for llama.cpp's adjacent-pair
rotation (ggml's NORM rope), qwen2/qwen3 GGUFs are not permuted and rotate
the two halves of each head (NEOX).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .errors import PtiError
from .kv import KVCache

TWIN_IDS = {"a": (0,), "b": (1,), "ab": (0, 1)}
ROPE_CHUNK = 4096       # positions per RoPE table chunk: every chunk is computed by the same call shape


class Model:
    def __init__(self, ssq, backend, twins: str = "a"):
        if twins not in TWIN_IDS:
            raise PtiError(f"--twins must be a, b or ab, got {twins!r}")
        self.cfg = cfg = ModelConfig.from_ssq(ssq)
        self.ssq = ssq                       # the file it was loaded from
        self.backend = backend
        self.device = backend.device
        self.twins = TWIN_IDS[twins]
        self.context_length = cfg.context_length
        self.passes = 0                      # forward() calls: one per pass
        self.mats = {}
        # a backend that can stack matrices of one K gets q|k|v and gate|up as one matmul each
        fuse = getattr(backend, "load_matrices", None)
        for i in range(cfg.n_layers):
            b = f"blk.{i}."
            for group in (("attn_q", "attn_k", "attn_v"), ("ffn_gate", "ffn_up"), ("attn_output",), ("ffn_down",)):
                names = [b + m + ".weight" for m in group]
                if len(group) > 1 and fuse is not None:
                    self.mats[b + "|".join(group)] = fuse(ssq, names, twins)
                else:
                    self.mats.update({n: backend.load_matrix(ssq, n, twins) for n in names})
        out = "token_embd.weight" if cfg.tied_embeddings else "output.weight"
        self.mats[out] = backend.load_matrix(ssq, out, twins)
        vec_names = [n for n in ssq.tensor_names if not ssq.is_matrix(n)]
        self.vecs = {t: {n: self._tensor(ssq.dense(n, t)) for n in vec_names} for t in self.twins}
        for vecs in self.vecs.values():      # joint per-layer vectors: one op for q|k|v and q|k
            for i in range(cfg.n_layers):
                b = f"blk.{i}."
                if cfg.qkv_bias:
                    vecs[b + "qkv_bias"] = torch.cat([vecs[b + f"attn_{m}.bias"] for m in "qkv"])
                if cfg.qk_norm:
                    vecs[b + "qk_norm"] = torch.cat([vecs[b + "attn_q_norm.weight"].expand(cfg.n_heads, -1),
                                                     vecs[b + "attn_k_norm.weight"].expand(cfg.n_kv_heads, -1)])
        # the embedding table stays int8 + scales; forward dequantises only the rows it gathers
        self.embd = {}
        for t in self.twins:
            if ssq.identical and self.embd:
                self.embd[t] = next(iter(self.embd.values()))
                continue
            q, d = ssq.q8("token_embd.weight", t)
            self.embd[t] = (torch.from_numpy(q), torch.from_numpy(d.astype("float32")))
        self._rope_cos = torch.empty(0, cfg.head_dim // 2, device=self.device)
        self._rope_sin = self._rope_cos

    def _tensor(self, a) -> torch.Tensor:
        return torch.from_numpy(a).to(self.device, self.backend.act_dtype)

    def new_kv(self, capacity: int = 256) -> KVCache:
        c = self.cfg
        return KVCache(c.n_layers, c.n_kv_heads, c.head_dim, c.context_length, capacity,
                       self.device, self.backend.act_dtype)

    # -- pieces ---------------------------------------------------------
    def _embed(self, tokens: list[int], twin: int) -> torch.Tensor:
        q, d = self.embd[twin]
        ids = torch.tensor(tokens, dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.cfg.vocab):
            raise PtiError(f"token id out of range 0..{self.cfg.vocab - 1}")
        rows = q[ids].float().view(len(tokens), d.shape[1], -1) * d[ids][:, :, None]
        return rows.view(len(tokens), -1)[:, :self.cfg.hidden].to(self.device, self.backend.act_dtype)

    def _linear(self, x: torch.Tensor, name: str, n_a: int) -> torch.Tensor:
        """x @ W^T: rows [:n_a] on twin A, the rest on twin B (n_a = -1: all on twin B)."""
        w = self.mats[name]
        if n_a == x.shape[0]:
            return self.backend.matmul(x, w, 0)
        if n_a == 0:
            return self.backend.matmul(x, w, 1)
        ya, yb = self.backend.matmul_twins(x[:n_a], x[n_a:], w)
        return torch.cat([ya, yb])

    def _qkv(self, h: torch.Tensor, b: str, n_a: int) -> torch.Tensor:
        """q | k | v of layer b side by side (one fused matmul when the backend stacks them), biases added."""
        if b + "attn_q|attn_k|attn_v" in self.mats:
            qkv = self._linear(h, b + "attn_q|attn_k|attn_v", n_a)
        else:
            qkv = torch.cat([self._linear(h, b + f"attn_{m}.weight", n_a) for m in "qkv"], dim=-1)
        if self.cfg.qkv_bias:
            qkv = qkv + self._vec(b + "qkv_bias", n_a, h.shape[0])
        return qkv

    def _linear_split(self, x: torch.Tensor, b: str, group: tuple[str, ...], n_a: int) -> list[torch.Tensor]:
        """The outputs of several matrices of one layer: one fused matmul when loaded stacked."""
        fused = b + "|".join(group)
        if fused not in self.mats:
            return [self._linear(x, b + m + ".weight", n_a) for m in group]
        sizes = {"attn_q": self.cfg.q_dim, "attn_k": self.cfg.kv_dim, "attn_v": self.cfg.kv_dim,
                 "ffn_gate": self.cfg.ffn, "ffn_up": self.cfg.ffn}
        return list(self._linear(x, fused, n_a).split([sizes[m] for m in group], dim=-1))

    def _vec(self, name: str, n_a: int, n: int) -> torch.Tensor:
        """A per-twin vector (or [heads, d] table) broadcast to the rows: [1, ...] for one twin, [n, ...] for both."""
        if n_a == n or n_a == 0:
            return self.vecs[0 if n_a == n else 1][name][None]
        a, b = self.vecs[0][name], self.vecs[1][name]
        return torch.cat([a.expand(n_a, *a.shape), b.expand(n - n_a, *b.shape)])

    def _norm(self, x: torch.Tensor, name: str, n_a: int) -> torch.Tensor:
        """RMSNorm over the last dim, then the (per-twin) weight: the same ops whatever the twins in the pass."""
        # written out: F.rms_norm on CPU is the same ops plus dtype round trips, ~4x slower per call
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_eps)
        return x * self._vec(name, n_a, x.shape[0])

    def _rope_table(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [positions, head_dim/2], grown in fixed chunks (bits independent of growth)."""
        c = self.cfg
        while self._rope_cos.shape[0] < n:
            d = c.head_dim
            inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
            if c.rope_freq_factors:   # llama3 scaling: llama.cpp divides each frequency by its factor
                inv_freq = inv_freq / self.vecs[self.twins[0]]["rope_freqs.weight"].cpu()
            p0 = self._rope_cos.shape[0]
            pos = torch.arange(p0, p0 + ROPE_CHUNK, dtype=torch.float32) / c.rope_linear_factor
            freqs = pos[:, None] * inv_freq[None]
            self._rope_cos = torch.cat([self._rope_cos, freqs.cos().to(self.device)])
            self._rope_sin = torch.cat([self._rope_sin, freqs.sin().to(self.device)])
        return self._rope_cos, self._rope_sin

    def _rope(self, x: torch.Tensor, rope: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """x [rows, heads, head_dim]; rope = (cos, sin) [rows, 1, head_dim/2], or (cos + i sin,).
        Computed in float32 (the tables' type), returned in x's type."""
        dtype, x = x.dtype, x.float()
        if self.cfg.rope_neox:
            cos, sin = rope
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dtype)
        # adjacent pairs (x0, x1) as complex numbers x0 + i x1, rotated by cos + i sin
        rot = torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous()) * rope[0]
        return torch.view_as_real(rot).flatten(-2).to(dtype)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p0: int) -> torch.Tensor:
        """Attention of the rows q [n, H, D] at positions p0 .. p0+n-1 over k/v [>= p0+n, Hkv, D].

        Row by row, each over exactly its own prefix: the call shapes depend only
        on the row's position, never on how many rows the sequence has in the pass."""
        c = self.cfg
        n, group = q.shape[0], c.n_heads // c.n_kv_heads
        out = torch.empty(n, c.n_kv_heads, group, c.head_dim, device=q.device, dtype=q.dtype)
        qg = q.view(n, c.n_kv_heads, group, c.head_dim)
        scale = c.head_dim ** -0.5
        for i in range(n):
            length = p0 + i + 1
            kt = k[:length].permute(1, 2, 0)         # [Hkv, D, L]
            vt = v[:length].transpose(0, 1)          # [Hkv, L, D]
            scores = torch.bmm(qg[i], kt).mul_(scale)   # [Hkv, group, L]
            torch.bmm(scores.softmax(-1), vt, out=out[i])
        return out.view(n, c.q_dim)

    def _attend_prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of a whole prompt q [n, H, D] over its own k/v [n, Hkv, D], one call."""
        c = self.cfg
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                             is_causal=True, enable_gqa=c.n_heads != c.n_kv_heads)
        return out.transpose(0, 1).reshape(q.shape[0], c.q_dim)

    # -- the pass -------------------------------------------------------
    def forward(self, batch: list[tuple[KVCache, int, list[int]]],
                logit_tail: list[int] | None = None) -> torch.Tensor:
        """One pass; see the module docstring.  Returns float32 logits [rows, vocab] in batch order
        (with `logit_tail`: only the last logit_tail[i] rows of each item i)."""
        c = self.cfg
        if logit_tail is None:
            logit_tail = [len(t) for _, _, t in batch]
        if len(logit_tail) != len(batch) or any(not 0 <= n <= len(t) for n, (_, _, t) in zip(logit_tail, batch)):
            raise PtiError("logit_tail must give 0..len(tokens) rows for each sequence in the pass")
        for _, twin, tokens in batch:
            if twin not in self.twins:
                raise PtiError(f"twin {'AB'[twin] if twin in (0, 1) else twin} is not loaded in this model")
            if not tokens:
                raise PtiError("a sequence in the pass has no tokens")
        # rows of twin A first: the order the matmuls take them in
        order = sorted(range(len(batch)), key=lambda i: batch[i][1])
        seqs = [batch[i] for i in order]
        n_a = sum(len(t) for _, tw, t in seqs if tw == 0)
        starts = [kv.length for kv, _, _ in seqs]
        for (kv, _, t), p0 in zip(seqs, starts):
            kv.reserve(p0 + len(t))          # PtiError past the context length
        self.passes += 1
        pos = torch.tensor([p0 + j for (_, _, t), p0 in zip(seqs, starts) for j in range(len(t))])
        cos, sin = self._rope_table(int(pos.max()) + 1)
        cos, sin = cos[pos][:, None], sin[pos][:, None]
        rope = (cos, sin) if c.rope_neox else (torch.complex(cos, sin),)
        x = torch.cat([self._embed(t, tw) for _, tw, t in seqs])
        rows = x.shape[0]

        for i in range(c.n_layers):
            b = f"blk.{i}."
            h = self._norm(x, b + "attn_norm.weight", n_a)
            qkv = self._qkv(h, b, n_a)                              # [rows, q | k | v]
            qk = qkv[:, :c.q_dim + c.kv_dim].view(rows, c.n_heads + c.n_kv_heads, c.head_dim)
            if c.qk_norm:                                            # qwen3: RMSNorm per head
                qk = self._norm(qk, b + "qk_norm", n_a)
            qk = self._rope(qk, rope)                                # q and k heads in one call
            q, k = qk[:, :c.n_heads], qk[:, c.n_heads:]
            v = qkv[:, c.q_dim + c.kv_dim:].view(rows, c.n_kv_heads, c.head_dim)
            att = torch.empty(rows, c.q_dim, device=x.device, dtype=x.dtype)
            r0 = 0
            for (kv, _, t), p0 in zip(seqs, starts):
                r1 = r0 + len(t)
                kv.k[i, p0:p0 + len(t)] = k[r0:r1]
                kv.v[i, p0:p0 + len(t)] = v[r0:r1]
                if p0 == 0:
                    att[r0:r1] = self._attend_prefill(q[r0:r1], k[r0:r1], v[r0:r1])
                else:
                    att[r0:r1] = self._attend(q[r0:r1], kv.k[i], kv.v[i], p0)
                r0 = r1
            x = x + self._linear(att, b + "attn_output.weight", n_a)
            h = self._norm(x, b + "ffn_norm.weight", n_a)
            gate, up = self._linear_split(h, b, ("ffn_gate", "ffn_up"), n_a)
            x = x + self._linear(F.silu(gate) * up, b + "ffn_down.weight", n_a)

        for (kv, _, t), p0 in zip(seqs, starts):
            kv.length = p0 + len(t)
        # the rows that get logits, in the pass's (twin A first) order, then back to batch order
        tails = [logit_tail[i] for i in order]
        keep, r = [], 0
        for (_, _, t), n in zip(seqs, tails):
            keep.extend(range(r + len(t) - n, r + len(t)))
            r += len(t)
        if not keep:
            return torch.empty(0, c.vocab, device=x.device)
        if len(keep) < rows:
            x = x[torch.tensor(keep, device=x.device)]
        n_out_a = sum(n for (_, tw, _), n in zip(seqs, tails) if tw == 0)
        h = self._norm(x, "output_norm.weight", n_out_a)
        logits = self._linear(h, "token_embd.weight" if c.tied_embeddings else "output.weight", n_out_a).float()
        if order == list(range(len(batch))):
            return logits
        offsets, r = {}, 0
        for i in order:
            offsets[i] = r
            r += logit_tail[i]
        index = torch.cat([torch.arange(offsets[i], offsets[i] + logit_tail[i]) for i in range(len(batch))])
        return logits[index.to(logits.device)]
