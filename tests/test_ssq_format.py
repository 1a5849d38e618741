"""The 68-byte SSQ16 block and the Q8_0 <-> SSQ16 round trip."""

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

from pti_cli.ssq import format as F

# One block written out by hand: scale_A = 0.5 (f16 0x3800), scale_B = -2.0 (f16 0xC000),
# twin A's ints 0..31, twin B's ints -1..-32.  Each word: low byte B, high byte A.
HAND_BLOCK = bytes.fromhex(
    "0038" "00c0"
    "ff00" "fe01" "fd02" "fc03" "fb04" "fa05" "f906" "f807"
    "f708" "f609" "f50a" "f40b" "f30c" "f20d" "f10e" "f00f"
    "ef10" "ee11" "ed12" "ec13" "eb14" "ea15" "e916" "e817"
    "e718" "e619" "e51a" "e41b" "e31c" "e21d" "e11e" "e01f")


def test_hand_computed_block():
    qa = np.arange(32, dtype=np.int8).reshape(1, 32)
    qb = (-np.arange(1, 33)).astype(np.int8).reshape(1, 32)
    da = np.array([[0.5]], np.float16)
    db = np.array([[-2.0]], np.float16)
    raw = F.pack_ssq16(qa, da, qb, db)
    assert raw.shape == (1, 68) and raw.dtype == np.uint8
    assert len(HAND_BLOCK) == 68
    assert raw.tobytes() == HAND_BLOCK
    # the same as little-endian uint16 words (A << 8) | (B & 0xff)
    words = np.frombuffer(HAND_BLOCK[4:], "<u2")
    assert np.array_equal(words >> 8, np.arange(32))
    assert np.array_equal((words & 0xFF).astype(np.uint8).view(np.int8), qb[0])
    qa2, da2 = F.unpack_ssq16(raw, 0)
    qb2, db2 = F.unpack_ssq16(raw, 1)
    assert np.array_equal(qa2, qa) and np.array_equal(qb2, qb)
    assert da2.tobytes() == da.tobytes() and db2.tobytes() == db.tobytes()


def test_tail_block_zero_padded():
    # K = 40: two blocks per row, the second holds 8 weights and 24 zero-padded slots
    rng = np.random.default_rng()
    xa = rng.standard_normal((3, 40)).astype(np.float32)
    xb = rng.standard_normal((3, 40)).astype(np.float32)
    from pti_cli.ssq.quantise import quantize_q8_0
    raw = F.pack_ssq16(*quantize_q8_0(xa), *quantize_q8_0(xb))
    assert raw.shape == (3, 2 * 68) == (3, F.ssq16_row_bytes(40))
    tail = raw.reshape(3, 2, 68)[:, 1, 4 + 2 * 8:]
    assert not tail.any()


def test_q8_ssq16_q8_bit_exact_both_twins():
    rng = np.random.default_rng()
    rows, k = 7, 96
    qa_bytes = gguf.quants.quantize(rng.standard_normal((rows, k)).astype(np.float32) * 3, T.Q8_0)
    # twin B: arbitrary bytes, scales included (any f16 bit pattern must survive, NaN too)
    qb_bytes = rng.integers(0, 256, qa_bytes.shape, dtype=np.uint8)
    raw = F.pack_ssq16(*F.unpack_q8(qa_bytes), *F.unpack_q8(qb_bytes))
    assert raw.shape == (rows, 3 * 68)
    assert np.array_equal(F.pack_q8(*F.unpack_ssq16(raw, 0)), qa_bytes)
    assert np.array_equal(F.pack_q8(*F.unpack_ssq16(raw, 1)), qb_bytes)
    assert np.array_equal(F.pack_ssq16_q8(qa_bytes, qb_bytes), raw)      # the direct byte path
    # and the block layout holds for every block: scale_A, scale_B, then (B, A) byte pairs
    blocks = raw.reshape(-1, 68)
    a_blocks, b_blocks = qa_bytes.reshape(-1, 34), qb_bytes.reshape(-1, 34)
    assert np.array_equal(blocks[:, 0:2], a_blocks[:, 0:2])
    assert np.array_equal(blocks[:, 2:4], b_blocks[:, 0:2])
    assert np.array_equal(blocks[:, 4::2], b_blocks[:, 2:])
    assert np.array_equal(blocks[:, 5::2], a_blocks[:, 2:])


def test_dequantize_matches_gguf():
    rng = np.random.default_rng()
    qb = gguf.quants.quantize(rng.standard_normal((5, 64)).astype(np.float32), T.Q8_0)
    ref = gguf.quants.dequantize(qb, T.Q8_0)
    assert np.array_equal(F.dequantize_q8(*F.unpack_q8(qb), 64), ref)


def test_interleave_into_a_poisoned_buffer_matches_the_split_path():
    """format.interleave_q8_into (two 16-bit passes, then the scales) writes every byte
    of its output: the hand block, and random Q8_0 rows of several shapes, equal the
    independent split path (pack_ssq16 of unpacked ints and scales)."""
    qa = np.arange(32, dtype=np.int8).reshape(1, 32)
    qb = (-np.arange(1, 33)).astype(np.int8).reshape(1, 32)
    a_bytes = F.pack_q8(qa, np.array([[0.5]], np.float16))
    b_bytes = F.pack_q8(qb, np.array([[-2.0]], np.float16))
    out = np.full((1, 68), 0xAA, np.uint8)
    F.interleave_q8_into(a_bytes, b_bytes, out)
    assert out.tobytes() == HAND_BLOCK
    rng = np.random.default_rng()
    for rows, nb in ((1, 1), (5, 3), (64, 128)):
        a = rng.integers(0, 256, (rows, nb * 34), dtype=np.uint8)
        b = rng.integers(0, 256, (rows, nb * 34), dtype=np.uint8)
        out = np.full((rows, nb * 68), 0x55, np.uint8)
        F.interleave_q8_into(a, b, out)
        assert np.array_equal(out, F.pack_ssq16(*F.unpack_q8(a), *F.unpack_q8(b)))
