"""Make a real tuned twin of the default model (SmolLM2-135M-Instruct).

Loads the embedded GGUF into transformers (offline: transformers reads GGUF
through gguf-py), fine-tunes it for a few dozen steps on CPU on the small text
in examples/data/, and saves it as a Hugging Face folder (safetensors weights,
config.json, tokenizer).  `pti pack BASE.gguf OUT_FOLDER -o twin.ssq` then packs
the two as twins.

    python examples/make_tuned_twin.py --out tuned --steps 24
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")      # everything is local; never reach for the hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DATA = Path(__file__).parent / "data" / "lighthouse_notes.txt"


def smollm_pre_tokenizer(tokenizer) -> None:
    """Give the converted tokenizer SmolLM2's own pre-tokenizer.

    The GGUF says tokenizer.ggml.pre = "smollm": each digit is split off alone,
    then GPT-2's byte-level split.  transformers' GGUF conversion writes a plain
    ByteLevel pre-tokenizer instead, which tokenizes digit runs differently; the
    saved tokenizer.json should describe the tokenizer the model was trained with.
    """
    from tokenizers import pre_tokenizers
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])


def load_gguf_model(base: Path):
    """The GGUF's weights in a transformers model, dequantised to float32.

    from_pretrained(gguf_file=...) wants the `accelerate` package; the same
    conversion (names, llama Q/K rows back to Hugging Face's order) is
    transformers' load_gguf_checkpoint, used here directly.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    config = AutoConfig.from_pretrained(base.parent, gguf_file=base.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = load_gguf_checkpoint(str(base), return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict(state, strict=False)
    tied = config.tie_word_embeddings and result.missing_keys == ["lm_head.weight"]
    if result.unexpected_keys or (result.missing_keys and not tied):
        raise SystemExit(f"GGUF -> transformers: missing {result.missing_keys}, unexpected {result.unexpected_keys}")
    if tied:
        model.tie_weights()
    return model


def batches(ids, seq_len: int, batch: int, steps: int, seed: int):
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor(ids)
    while len(ids) < seq_len + 1:
        ids = torch.cat([ids, ids])
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq_len, (batch,), generator=g)
        yield torch.stack([ids[s:s + seq_len] for s in starts.tolist()])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, default=None, help="base GGUF (default: the embedded SmolLM2)")
    p.add_argument("--out", type=Path, default=Path("tuned"), help="output folder")
    p.add_argument("--data", type=Path, default=DATA, help="training text")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer

    if args.base is None:
        from pti_cli.default_model import default_gguf
        args.base = default_gguf()
    base = args.base.resolve()
    torch.manual_seed(args.seed)
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(base.parent, gguf_file=base.name)
    smollm_pre_tokenizer(tokenizer)
    model = load_gguf_model(base)
    print(f"loaded {base.name} into transformers in {time.time() - t0:.1f} s "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters)")

    ids = tokenizer(args.data.read_text(encoding="utf-8"))["input_ids"]
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    t0 = time.time()
    for step, x in enumerate(batches(ids, args.seq_len, args.batch, args.steps, args.seed)):
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 4 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.3f}  ({time.time() - t0:.0f} s)")
    model.eval()

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)               # safetensors
    tokenizer.save_pretrained(args.out)
    print(f"saved the tuned twin to {args.out}/")


if __name__ == "__main__":
    main()
