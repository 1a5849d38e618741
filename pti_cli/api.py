"""The small Python API: load an .ssq, generate, stream.

    from pti_cli.api import Pti
    pti = Pti("model.ssq")                    # or Pti() for the embedded default model
    results = pti.generate(["Summarise: ..."], max_tokens=64, spec="lookup")
    for piece in pti.stream("Tell me a story", max_tokens=64):
        print(piece, end="")

`generate` returns one `engine.Result` per sequence in input order.  With
`seqs` larger than the number of prompts, the prompts are repeated (copy i
is prompt i % len(prompts)) and every copy is its own sequence s = i, so
sampled copies differ.  Twins: "a" or "b" serve every sequence; "ab" gives
sequence s twin s % 2 (base and tuned side by side in the same passes).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator, Sequence

from .engine import Engine, EngineConfig, Request, Result
from .errors import PtiError
from .prompts import Prompt
from .sampling import SamplingParams

TWINS = ("a", "b", "ab")
BACKENDS = ("auto", "torch", "cuda", "hip")


def default_ssq() -> Path:
    """The embedded default model packed once into the user cache (atomic; reused while valid)."""
    from .default_model import cache_dir, default_gguf
    from .pack import pack
    from .ssq.read import SSQFile
    gguf = default_gguf()
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache_dir() / f"{gguf.stem}-{key}.ssq"
    if out.is_file():
        try:
            SSQFile(out)
            return out
        except PtiError:
            pass  # a corrupt cache entry: pack it again
    pack(gguf, None, out, force=True)
    return out


def fused_gpu_path(backend, config) -> bool:
    """Whether `pti run` takes the fused GPU pass (gpu_model.py: graphs, pti_ops kernels): the CUDA
    kernels backend and a llama-architecture model without biases or q/k norms; otherwise the
    reference forward (model.py) with the backend's matmuls."""
    from .backends.cuda import CudaBackend
    return (isinstance(backend, CudaBackend) and not backend.generic and config.arch == "llama"
            and not config.qkv_bias and not config.qk_norm and config.head_dim in (64, 128)
            and config.n_heads // config.n_kv_heads <= 8)


def twin_of(s: int, twins: str) -> int:
    return {"a": 0, "b": 1}.get(twins, s % 2)


def check_choices(twins: str = "a", backend: str = "auto") -> None:
    if twins not in TWINS:
        raise PtiError(f"--twins must be one of {', '.join(TWINS)}, got {twins!r}")
    if backend not in BACKENDS:
        raise PtiError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def engine_config(*, max_tokens: int = 256, spec: str = "lookup", draft: int = 8, seqs: int = 1,
                  temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                  seed: int = 0, stops: Sequence[str] = (), row_quantum: int = 1) -> EngineConfig:
    """A checked EngineConfig (PtiError on any bad value)."""
    return EngineConfig(max_tokens=max_tokens, spec=spec, draft=draft, seqs=seqs, stops=tuple(stops),
                        row_quantum=row_quantum,
                        sampling=SamplingParams(temperature, top_k, top_p, min_p, seed)).check()


class _ModelPort:
    """What the engine needs from a Model: forward, new_kv, context_length."""

    def __init__(self, model, context_length: int):
        self.model = model
        self.context_length = context_length

    @property
    def passes(self) -> int:
        return self.model.passes

    def new_kv(self):
        return self.model.new_kv()

    def forward(self, batch, logit_tail=None):
        return self.model.forward(batch, logit_tail)


class _TokenizerPort:
    """What the engine needs from a Tokenizer: EOG ids, a UTF-8-safe stream decoder, token text."""

    def __init__(self, tok):
        from .tokenizer import StreamDecoder
        self.tok = tok
        self.eog_ids = frozenset(tok.eog_ids)
        self._decoder = StreamDecoder

    def stream_decoder(self):
        return _Decoder(self._decoder(self.tok))

    def token_text(self, t: int) -> str:
        return self.tok.token_text(t)


class _Decoder:
    def __init__(self, dec):
        self.dec = dec

    def add(self, t: int) -> str:
        return self.dec.feed(t)

    def flush(self) -> str:
        return self.dec.flush()


class Pti:
    """An opened .ssq model, ready to generate."""

    def __init__(self, path: str | Path | None = None, backend: str = "auto", twins: str = "a"):
        check_choices(twins, backend)
        from .ssq.read import SSQFile
        self.path = Path(path) if path is not None else default_ssq()
        if self.path.is_dir():
            raise PtiError(f"{self.path}: is a directory, not an .ssq file")
        self.ssq = SSQFile(self.path)
        from .backends import load_backend
        from .config import ModelConfig
        from .model import Model
        from .tokenizer import Tokenizer
        self.twins = twins
        self.config = ModelConfig.from_ssq(self.ssq)
        self.tokenizer = Tokenizer.from_metadata(self.ssq.metadata)
        self.backend = load_backend(backend)
        self._tok_port = _TokenizerPort(self.tokenizer)
        self.fused = fused_gpu_path(self.backend, self.config)
        if self.fused:   # the GPU pass (gpu_model.py): built on the first engine, sized for its sequences
            self.model, self._model_port = None, None
        else:
            self.model = Model(self.ssq, self.backend, twins=twins)
            self._model_port = _ModelPort(self.model, self.config.context_length)

    @property
    def has_chat_template(self) -> bool:
        from .chat import has_chat_template
        return has_chat_template(self.ssq.metadata)

    def encode(self, prompt: str | Prompt, chat: bool | None = None) -> list[int]:
        """Token ids of a prompt: through the model's chat template unless raw."""
        p = prompt if isinstance(prompt, Prompt) else Prompt("prompt", text=prompt)
        use_chat = self.has_chat_template if chat is None else chat
        if use_chat:
            if not self.has_chat_template:
                raise PtiError(f"{p.where}: this model has no chat template; use --raw")
            from .chat import apply_chat_template
            messages = p.messages or [{"role": "user", "content": p.text}]
            try:
                text = apply_chat_template(self.ssq.metadata, messages, self.tokenizer)
            except PtiError as e:
                raise PtiError(f"{p.where}: {e}") from None
        elif p.messages is not None:
            raise PtiError(f"{p.where}: a \"messages\" prompt needs --chat")
        else:
            text = p.text
        ids = self.tokenizer.encode(text)
        bos = self.tokenizer.bos_id
        if len(ids) >= 2 and ids[0] == ids[1] == bos:  # the template wrote BOS and the tokenizer added one
            ids = ids[1:]
        if not ids:
            raise PtiError(f"{p.where}: empty prompt")
        return ids

    def requests(self, prompts: Sequence[str | Prompt], seqs: int = 1, chat: bool | None = None) -> list[Request]:
        if not prompts:
            raise PtiError("no prompts given")
        ids = [self.encode(p, chat) for p in prompts]
        n = max(len(ids), seqs)
        return [Request(s, ids[s % len(ids)], twin_of(s, self.twins)) for s in range(n)]

    def engine(self, **opts) -> Engine:
        # the CPU reference computes rows in tiles: drafts are trimmed to fill, not open, a tile
        opts.setdefault("row_quantum", getattr(self.backend, "tile_rows", 1))
        cfg = engine_config(**opts)
        if self.fused:
            self._gpu_port(cfg.seqs)
        return Engine(self._model_port, self._tok_port, cfg)

    def _gpu_port(self, seqs: int) -> None:
        """The fused GPU model with KV slots for `seqs` sequences (rebuilt only to grow)."""
        if self._model_port is not None and self._model_port.model.max_seqs >= seqs:
            return
        import torch
        from .gpu_model import EnginePort, load_ssq
        from .gpu_ops import CudaOps
        dev = self.backend.device
        self.model = self._model_port = None
        torch.cuda.empty_cache()
        max_seqs = max(seqs, 4)
        c = self.config
        per_pos = c.n_layers * 2 * c.n_kv_heads * c.head_dim * 2           # bf16 K and V, every layer
        free = torch.cuda.mem_get_info(dev)[0] - self.path.stat().st_size  # the weights go first
        fit = int(0.5 * free) // (max_seqs * per_pos) - 1                   # half of what is left for the cache
        if fit < 64:
            raise PtiError(f"the GPU has room for {max(fit, 0)} positions per sequence at --seqs {max_seqs}: "
                           f"use fewer sequences")
        model = load_ssq(self.ssq, self.backend, dev, self.twins, max_seqs=max_seqs,
                         max_ctx=min(c.context_length, fit), ops=CudaOps(dev))
        self.model, self._model_port = model, EnginePort(model)

    def generate(self, prompts: str | Sequence[str | Prompt], *, chat: bool | None = None,
                 on_pass=None, **opts) -> list[Result]:
        """Run every prompt to the end; one Result per sequence, in input order."""
        prompts = [prompts] if isinstance(prompts, (str, Prompt)) else list(prompts)
        eng = self.engine(**opts)
        eng.submit(self.requests(prompts, eng.cfg.seqs, chat))
        return eng.run(on_pass)

    def stream(self, prompt: str | Prompt, *, chat: bool | None = None, **opts) -> Iterator[str]:
        """Text pieces of one sequence as they become final (UTF-8 safe, stop strings held back)."""
        eng = self.engine(**{**opts, "seqs": 1})
        eng.submit(self.requests([prompt], 1, chat))
        while eng.queue or eng.active:
            for seq in eng.step():
                piece = eng.new_text(seq)
                if piece:
                    yield piece
