#!/usr/bin/env bash
# Make a tuned twin of the default model and pack it with the base into one .ssq file.
#
#   examples/pack_twin.sh [WORK_DIR] [STEPS]
#
# 1. make_tuned_twin.py: the embedded SmolLM2-135M-Instruct GGUF, fine-tuned on CPU for
#    STEPS steps (default 24) on examples/data/, saved as a Hugging Face folder (safetensors).
# 2. pti pack: base GGUF (twin A) + tuned folder (twin B) -> WORK_DIR/twin.ssq.
# 3. pti inspect: what is inside.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${1:-twin-example}"
steps="${2:-24}"
python="${PYTHON:-python}"
pti="${PTI:-pti}"

mkdir -p "$work"
base="$("$python" -c 'from pti_cli.default_model import default_gguf; print(default_gguf())')"

echo "== fine-tuning a twin of $(basename "$base") for $steps steps"
"$python" "$here/make_tuned_twin.py" --base "$base" --out "$work/tuned" --steps "$steps"

echo "== packing base + tuned into $work/twin.ssq"
"$pti" pack "$base" "$work/tuned" -o "$work/twin.ssq" --name-a base --name-b tuned --force

echo "== inspecting"
"$pti" inspect "$work/twin.ssq"
