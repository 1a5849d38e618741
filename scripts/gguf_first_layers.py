#!/usr/bin/env python3
"""A GGUF of a model's first N layers: every metadata key (block_count set to N) and the tensors
outside the layers (embedding, final norm, output), then blk.0 .. blk.N-1, each in its own type,
bytes as stored.  Small enough to carry to the GPU machine, whose runs take files of 64 MiB in all
(scripts/h16_check.py: h16 on a real model's weights and activations).
    python3 scripts/gguf_first_layers.py IN.gguf OUT.gguf N"""

import sys

from gguf import GGUFReader, GGUFValueType, GGUFWriter


def main(src: str, dst: str, n: int) -> None:
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)   # writes general.architecture itself
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        value = n if f.name == f"{arch}.block_count" else f.contents()
        sub = f.types[-1] if f.types[0] == GGUFValueType.ARRAY else None
        w.add_key_value(f.name, value, f.types[0], sub_type=sub)
    for t in r.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n:
            continue
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
