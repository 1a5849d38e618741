"""Fuzz the GGUF input path: thousands of mutated and truncated copies of a small valid GGUF.

Each mutant is validated and opened in-process (in a child process that runs the
batch under a memory limit, each case under a time limit).  A mutant either
still loads (and then every tensor row reads) or raises PtiError; any other
exception, a hang or a crash fails.  When validate_gguf accepts a file,
gguf-py's own reader must accept it too: the validator is what stands between
gguf-py and a hostile header.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from source_helpers import make_gguf

N_CASES = 3000
SEEDS = (1, 2)          # two children, so two cores share the work

WORKER = textwrap.dedent(r'''
    import json, random, resource, signal, struct, sys, traceback, warnings
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    import numpy as np, gguf
    from pti_cli.errors import PtiError
    from pti_cli.sources.checkpoint import open_checkpoint
    from pti_cli.sources.gguf_validate import validate_gguf

    src, work, seed, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    base = src.read_bytes()
    layout = validate_gguf(src)
    header_end = layout.data_offset
    # offsets of every header field gguf-py knows: counts, lengths, types, dims, offsets
    reader = gguf.GGUFReader(src)
    field_offsets = []
    for f in list(reader.fields.values()) + [t.field for t in reader.tensors]:
        off = f.offset
        for part in f.parts:
            field_offsets.append((off, part.nbytes))
            off += part.nbytes
    del reader
    HUGE = [2**62, 2**64 - 1, 2**63, 2**32, 2**32 - 1, 2**31, len(base), len(base) + 1, 0, 1, 7, 255]

    def mutate(rng):
        data = bytearray(base)
        kind = rng.choice(["flip", "truncate", "field", "field", "splice", "tail"])
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(header_end)] ^= rng.randint(1, 255)
        elif kind == "truncate":
            cut = rng.randrange(len(base))
            data = data[:cut]
        elif kind == "field":
            off, size = rng.choice(field_offsets)
            value = rng.choice(HUGE + [rng.getrandbits(8 * size)]) % (1 << (8 * size))
            data[off:off + size] = value.to_bytes(size, "little")
        elif kind == "splice":
            i = rng.randrange(header_end)
            if rng.random() < 0.5:
                del data[i:i + rng.randint(1, 16)]
            else:
                data[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
        else:   # damage the tensor data or the end of the file
            i = rng.randrange(header_end, len(base))
            data[i] ^= rng.randint(1, 255)
            if rng.random() < 0.5:
                data = data[:len(data) - rng.randint(1, 64)]
        return kind, bytes(data)

    class Hang(Exception):
        pass

    def on_alarm(signum, frame):
        raise Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    rng = random.Random(seed)
    counts = {"loaded": 0, "rejected": 0}
    failures = []
    path = work / f"mutant{seed}.gguf"
    for case in range(n):
        kind, data = mutate(rng)
        path.write_bytes(data)
        stage = "validate"
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    validate_gguf(path)
                except PtiError:
                    validated = False
                else:
                    validated = True
                    stage = "gguf-py reader after validation"
                    gguf.GGUFReader(path)
                stage = "open"
                ck = open_checkpoint(path)
                stage = "read rows"
                for t in ck.tensors.values():
                    t.f32_rows(0, t.shape[0])
                    t.q8_rows(0, t.shape[0])
                counts["loaded"] += 1
        except PtiError as e:
            msg = str(e)
            if "\n" in msg or not msg:
                failures.append((case, kind, stage, "PtiError is not one line: " + repr(msg)))
            else:
                counts["rejected"] += 1
        except Hang:
            failures.append((case, kind, stage, "no answer within 5 s"))
        except BaseException as e:
            failures.append((case, kind, stage, "".join(traceback.format_exception_only(type(e), e)).strip()))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if failures and len(failures) >= 20:
            break
    print(json.dumps({"counts": counts, "failures": failures[:20]}))
''')


def test_fuzz_gguf_mutants(tmp_path):
    src = tmp_path / "valid.gguf"
    make_gguf(src, n_vocab=24, hidden=32, seed=0)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(src), str(tmp_path), str(seed),
                               str(N_CASES // len(SEEDS))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in SEEDS]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError("fuzz batch did not finish in 240 s")
        assert p.returncode == 0, f"fuzz worker crashed (exit {p.returncode}): {err[-2000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(map(str, failures))
    loaded = sum(r["counts"]["loaded"] for r in results)
    rejected = sum(r["counts"]["rejected"] for r in results)
    assert loaded + rejected == N_CASES
    # both outcomes occur: the mutations are neither all harmless nor all fatal
    assert loaded > N_CASES // 20 and rejected > N_CASES // 4, (loaded, rejected)


ST_WORKER = textwrap.dedent(r'''
    import json, random, resource, shutil, signal, sys, traceback, warnings
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, 4 << 30))
    import numpy as np
    from pti_cli.errors import PtiError
    from pti_cli.sources.checkpoint import open_checkpoint

    folder, seed, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    weights = folder / "model.safetensors"
    base = weights.read_bytes()
    header_end = 8 + int.from_bytes(base[:8], "little")

    def on_alarm(signum, frame):
        raise TimeoutError("no answer within 5 s")

    signal.signal(signal.SIGALRM, on_alarm)
    rng = random.Random(seed)
    counts = {"loaded": 0, "rejected": 0}
    failures = []
    for case in range(n):
        data = bytearray(base)
        kind = rng.choice(["flip", "digit", "truncate", "length"])
        if kind == "flip":
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(header_end)] ^= rng.randint(1, 255)
        elif kind == "digit":      # change a number in the JSON header (shapes, offsets)
            digits = [i for i in range(8, header_end) if chr(data[i]).isdigit()]
            data[rng.choice(digits)] = ord(str(rng.randrange(10)))
        elif kind == "truncate":
            data = data[:rng.randrange(len(data))]
        else:
            data[:8] = rng.choice([2**62, 2**32, header_end, header_end - 9, 0, 1]).to_bytes(8, "little")
        weights.write_bytes(bytes(data))
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                ck = open_checkpoint(folder)
                for t in ck.tensors.values():
                    t.f32_rows(0, t.shape[0])
            counts["loaded"] += 1
        except PtiError as e:
            counts["rejected"] += 1
        except BaseException as e:
            failures.append((case, kind, "".join(traceback.format_exception_only(type(e), e)).strip()))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps({"counts": counts, "failures": failures[:20]}))
''')


def test_fuzz_safetensors_mutants(tmp_path):
    from source_helpers import make_hf_model
    make_hf_model(tmp_path, "llama", seed=3, hidden_size=32, intermediate_size=32, num_hidden_layers=1)
    n = 300
    run = subprocess.run([sys.executable, "-c", ST_WORKER, str(tmp_path), "5", str(n)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert not result["failures"], "\n".join(map(str, result["failures"]))
    assert sum(result["counts"].values()) == n and result["counts"]["rejected"] > n // 4, result["counts"]
