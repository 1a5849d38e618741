"""Q8_0 quantisation bit-identical to gguf.quants.quantize, from F32, F16 and Q4 inputs."""

import numpy as np
import gguf
import pytest
from gguf import GGMLQuantizationType as T

from pti_cli.ssq.format import pack_q8
from pti_cli.ssq.quantise import quantize_q8_0


def _reference(x: np.ndarray) -> np.ndarray:
    return gguf.quants.quantize(np.asarray(x, np.float32), T.Q8_0)


def _random_rows(rng, rows=64, k=256):
    x = rng.standard_normal((rows, k)).astype(np.float32)
    return x * np.exp(rng.uniform(-8, 4, (rows, 1))).astype(np.float32)


def test_f32_bit_identical():
    rng = np.random.default_rng()
    x = _random_rows(rng)
    x[0, :32] = 0                         # an all-zero block: scale 0
    x[1, 32:64] = 1e-30                   # subnormal-scale block
    x[2, :] = np.round(x[2, :])           # integers: many exact ties
    assert np.array_equal(pack_q8(*quantize_q8_0(x)), _reference(x))


def test_round_half_away_from_zero():
    # max |x| = 127 gives d = 1, so x * id lands exactly on .5: C roundf rounds away
    # from zero (np.rint would give 2, -2, 0)
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [127, 2.5, -2.5, 0.5]
    q, d = quantize_q8_0(x)
    assert q[0, :4].tolist() == [127, 3, -3, 1]
    assert np.array_equal(pack_q8(q, d), _reference(x))


def test_f16_input_bit_identical(tmp_path):
    rng = np.random.default_rng()
    x16 = _random_rows(rng).astype(np.float16)
    x = gguf.quants.dequantize(x16.view(np.uint8), T.F16)
    assert np.array_equal(pack_q8(*quantize_q8_0(x)), _reference(x))


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_1, T.BF16])
def test_quantised_input_bit_identical(qtype):
    rng = np.random.default_rng()
    stored = gguf.quants.quantize(_random_rows(rng), qtype)
    x = gguf.quants.dequantize(stored, qtype)
    assert np.array_equal(pack_q8(*quantize_q8_0(x)), _reference(x))


def test_row_length_not_multiple_of_32_zero_padded():
    rng = np.random.default_rng()
    x = _random_rows(rng, rows=5, k=40)
    padded = np.zeros((5, 64), np.float32)
    padded[:, :40] = x
    assert np.array_equal(pack_q8(*quantize_q8_0(x)), _reference(padded))


def test_rounding_at_every_tie_and_its_neighbours():
    # every k + 0.5 in [-127.5, 127.5] and the float32 values just above and below:
    # the places where a rounding shortcut would differ from C roundf
    ties = np.arange(-127, 128, dtype=np.float32) + np.float32(0.5)
    ties = ties[np.abs(ties) < 127]
    vals = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)),
                           np.array([0.49999997, -0.49999997, 0.0, -0.0], np.float32)])
    vals = np.concatenate([vals, np.zeros(-len(vals) % 31, np.float32)])
    # each block: 31 test values and 127, so the scale is exactly 1 and y = x
    blocks = np.concatenate([vals.reshape(-1, 31), np.full((len(vals) // 31, 1), 127, np.float32)], axis=1)
    assert np.array_equal(pack_q8(*quantize_q8_0(blocks)), _reference(blocks))
    assert np.array_equal(quantize_q8_0(blocks)[0][:, :31].astype(np.float32),
                          gguf.quants.np_roundf(blocks[:, :31]))
