"""The packed model file: round trip, verification, and 100 corrupted files that must each
raise FormatError (never a crash, never a silent load)."""

import json
import random
import struct

import pytest
import torch

from qsa import safefile
from qsa.errors import FormatError
from qsa.models.qtransformer import QTransformer, QTransformerConfig
from qsa.quantize import Int8QuaternionLayer, load_packed, read_packed, save_packed


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return QTransformer(QTransformerConfig(dim=32, num_layers=1, num_heads=2)).eval()


@pytest.fixture(scope="module")
def int8_file(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("packed") / "m.qsa"
    save_packed(model, path, precision="int8", card={"data": "test"})
    return path


def test_int8_roundtrip(model, int8_file, tmp_path):
    x = torch.randn(2, 7, 16)
    loaded = load_packed(int8_file)
    assert any(isinstance(m, Int8QuaternionLayer) for m in loaded.modules())
    assert loaded.config == model.config
    with torch.no_grad():
        ref = model(x)
        out = loaded(x)
        deq = load_packed(int8_file, dequantize=True)(x)
    assert (out - deq).abs().max() < 1e-5  # int8 path == dequantised fp32 weights
    snr = 10 * torch.log10(ref.pow(2).mean() / (ref - out).pow(2).mean())
    assert snr > 30
    # re-saving the loaded int8 model writes the identical file
    again = tmp_path / "again.qsa"
    save_packed(loaded, again)
    assert again.read_bytes() == int8_file.read_bytes()
    tensors, meta = read_packed(int8_file)
    assert meta["card"] == {"data": "test"} and meta["precision"] == "int8"
    q = [k for k in meta["quantized"]]
    assert q and all(tensors[f"{k}.weight"].dtype == torch.int8 for k in q)


def test_fp32_roundtrip_is_exact(model, tmp_path):
    path = tmp_path / "f.qsa"
    save_packed(model, path, precision="fp32")
    loaded = load_packed(path)
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))


def test_packed_file_stores_components_not_expanded(model, int8_file):
    tensors, meta = read_packed(int8_file)
    n_int8 = sum(t.numel() for t in tensors.values() if t.dtype == torch.int8)
    n_quat = sum(m.weight.numel() for m in model.modules() if hasattr(m, "dense_weight"))
    assert n_int8 == n_quat  # 1/4 of the dense weights, one byte each


def test_wrong_version_is_named(model, tmp_path):
    tensors, meta = read_packed(_save(model, tmp_path / "v.qsa"))
    meta = {k: v for k, v in meta.items() if k != "payload_sha256"}
    meta["format_version"] = 99
    path = tmp_path / "v99.qsa"
    safefile.save(path, tensors, meta)
    with pytest.raises(FormatError, match="format version 99"):
        load_packed(path)


def _save(model, path):
    save_packed(model, path)
    return path


def test_not_a_qsa_file(tmp_path):
    p = tmp_path / "x.qsa"
    p.write_bytes(b"RIFF....WAVEfmt " + bytes(100))
    with pytest.raises(FormatError):
        load_packed(p)
    with pytest.raises(FormatError, match="no such file"):
        load_packed(tmp_path / "missing.qsa")
    with pytest.raises(FormatError, match="folder"):
        load_packed(tmp_path)
    # a valid safetensors file that qsa did not write
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(3)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(FormatError):
        load_packed(tmp_path / "foreign.safetensors")


def _mutations(data: bytes, n: int, seed: int = 1234):
    rng = random.Random(seed)
    (hlen,) = struct.unpack("<Q", data[:8])
    for i in range(n):
        kind = i % 5
        b = bytearray(data)
        if kind == 0:  # one bit flip anywhere
            pos = rng.randrange(len(b))
            b[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:  # truncation
            b = b[: rng.randrange(len(b))]
        elif kind == 2:  # several random bytes in the header
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(8, 8 + hlen)
                b[pos] = (b[pos] + rng.randrange(1, 256)) % 256
        elif kind == 3:  # splice: a chunk copied over another place
            a0, a1 = sorted(rng.sample(range(len(b)), 2))
            dst = rng.randrange(len(b) - (a1 - a0))
            if b[dst : dst + a1 - a0] == b[a0:a1]:
                dst = (dst + 1) % (len(b) - (a1 - a0))
            b[dst : dst + a1 - a0] = b[a0:a1]
        else:  # payload bit flips
            pos = rng.randrange(8 + hlen, len(b))
            b[pos] ^= 1 << rng.randrange(8)
        if bytes(b) != data:
            yield i, bytes(b)


def test_100_corrupted_files_each_raise_format_error(int8_file, tmp_path):
    data = int8_file.read_bytes()
    seen = 0
    for i, bad in _mutations(data, 110):
        p = tmp_path / f"bad{i}.qsa"
        p.write_bytes(bad)
        with pytest.raises(FormatError):
            load_packed(p)
        seen += 1
    assert seen >= 100


def test_header_is_canonical_json(int8_file):
    data = int8_file.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = json.loads(header["__metadata__"]["qsa"])
    assert meta["format"] == "qsa.packed" and len(meta["payload_sha256"]) == 64
    assert n % 8 == 0
