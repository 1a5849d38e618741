#!/usr/bin/env python3
"""h16 on a real model (GPU machine): the fused GPU pass with its default h16 matrices against the same
pass with PTI_H16=0 (bf16 inputs everywhere) and against the CPU float32 reference forward, on one prompt:
logits of every prompt position (relative error, argmax agreement), then greedy tokens of each GPU form.
The model: an .ssq, or a GGUF packed first (e.g. the first layers of the default model,
scripts/gguf_first_layers.py, small enough to carry to the GPU machine).  Prints a short report.
    python3 scripts/h16_check.py MODEL.(ssq|gguf) PROMPT.txt|IDS.json [STEPS]
PROMPT.txt: encoded with the model's chat template (needs the tokenizers package); IDS.json: token ids.
Run of record (docs/perf.md, session 21; README, "What has not been run"):
    python3 scripts/gguf_first_layers.py $(python3 -c "from pti_cli.default_model import default_gguf; print(default_gguf())") /tmp/smollm2_8l.gguf 8
    python3 scripts/h16_check.py /tmp/smollm2_8l.gguf examples/prompts/demo.txt 64"""

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def main(model: str, ids_path: str, steps: int = 64) -> None:
    from pti_cli.backends.cuda import CudaBackend
    from pti_cli.backends.torch_ref import TorchRefBackend
    from pti_cli.gpu_model import EnginePort, h16_roles, load_ssq
    from pti_cli.gpu_ops import CudaOps
    from pti_cli.model import Model
    from pti_cli.ssq.read import SSQFile

    tmp = tempfile.TemporaryDirectory()
    path = Path(model)
    if path.suffix == ".gguf":
        from pti_cli.pack import pack
        pack(path, None, Path(tmp.name) / "model.ssq")
        path = Path(tmp.name) / "model.ssq"
    ssq = SSQFile(path)
    if ids_path.endswith(".json"):
        ids = json.loads(Path(ids_path).read_text())
    else:
        from pti_cli.api import Pti
        ids = Pti(path, backend="torch").encode(Path(ids_path).read_text())
    dev = torch.device("cuda")
    backend, ops = CudaBackend(), CudaOps(dev)
    logits, greedy = {}, {}
    for form, env in (("h16", ""), ("bf16", "0")):
        os.environ["PTI_H16"] = env
        port = EnginePort(load_ssq(ssq, backend, dev, "a", max_seqs=2, max_ctx=len(ids) + steps + 8, ops=ops))
        roles = sorted(h16_roles(backend, port.model.shape))
        port_layers = port.model.shape.n_layers
        kv = port.new_kv()
        logits[form] = port.forward([(kv, 0, ids)]).cpu()
        toks = [int(logits[form][-1].argmax())]
        for _ in range(steps - 1):   # one pass a token, through the passes plain decoding runs
            toks.append(int(port.forward([(kv, 0, toks[-1:])])[-1].argmax()))
        greedy[form] = toks
        print(f"{form}: matrices with h16 inputs: {', '.join(roles) or 'none'}")
        del port
        torch.cuda.empty_cache()
    ref = Model(ssq, TorchRefBackend(), twins="a")
    logits["cpu"] = ref.forward([(ref.new_kv(len(ids) + 8), 0, ids)]).float()
    n = len(ids)
    print(f"{Path(model).name}: {port_layers} layers, {n} prompt tokens, {steps} greedy steps")
    for a, b in (("h16", "bf16"), ("h16", "cpu"), ("bf16", "cpu")):
        agree = float((logits[a].argmax(-1) == logits[b].argmax(-1)).float().mean())
        print(f"logits {a} vs {b}: relative error {rel_err(logits[a], logits[b]):.2e}, "
              f"max abs diff {float((logits[a] - logits[b]).abs().max()):.3g}, argmax agreement {agree:.3f} of {n}")
    same = next((i for i, (x, y) in enumerate(zip(greedy["h16"], greedy["bf16"])) if x != y), steps)
    print(f"greedy: h16 and bf16 agree on the first {same} of {steps} tokens")
    print("greedy h16 :", greedy["h16"][:24])
    print("greedy bf16:", greedy["bf16"][:24])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 64)
