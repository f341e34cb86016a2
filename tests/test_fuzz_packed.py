"""Fuzz the packed model file loader: 300 mutants of a real file, each loaded in its own
subprocess; every one must end in FormatError, none in a signal or a foreign exception."""

import pytest
import torch
from fuzzlib import fuzz

from qsa.errors import FormatError
from qsa.models.qtransformer import QTransformer, QTransformerConfig
from qsa.quantize import load_packed, save_packed


@pytest.mark.parametrize("precision", ["int8", "fp32"])
def test_fuzz_packed_model_file(tmp_path, precision):
    torch.manual_seed(0)
    path = tmp_path / "m.qsa"
    save_packed(QTransformer(QTransformerConfig(dim=32, num_layers=1, num_heads=2)), path,
                precision=precision)
    outcomes = fuzz(load_packed, FormatError, path.read_bytes(), n=300 if precision == "int8"
                    else 100, suffix=".qsa", seed=7)
    assert outcomes["signal"] == 0 and outcomes["other"] == 0 and outcomes["loaded"] == 0, outcomes
