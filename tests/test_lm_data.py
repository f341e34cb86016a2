"""Byte corpora: default stdlib corpora (on a tiny fake stdlib), enwik8 / CodeParrot / folder
readers on tiny fixtures, manifests with sha256 of every split."""

import gzip
import hashlib
import json
import zipfile

import numpy as np
import pytest

from qsa.errors import FormatError, QsaError
from qsa.lm import data as lmdata


def _fake_stdlib(root):
    (root / "pkg").mkdir(parents=True)
    for i in range(40):
        (root / "pkg" / f"mod{i}.py").write_text(
            f'"""Module {i} docstring."""\n\n\ndef f{i}(x):\n    """Return x plus {i}."""\n'
            f"    return x + {i}\n"
        )
    (root / "bad.py").write_text("print 'python 2'\n")  # unparsable: skipped for text
    (root / "site-packages").mkdir()
    (root / "site-packages" / "third.py").write_text('"""not stdlib"""\n')
    return root


def _check_manifest(c):
    for s in lmdata.SPLITS:
        arr = c.split(s)
        info = c.manifest["splits"][s]
        assert info["bytes"] == arr.size
        assert info["sha256"] == hashlib.sha256(arr.tobytes()).hexdigest()


@pytest.mark.parametrize("name", ["text", "code"])
def test_default_corpus_built_split_and_cached(tmp_path, name):
    root = _fake_stdlib(tmp_path / "lib")
    c = lmdata._default_corpus(name, root=root, cache=tmp_path / "cache")
    _check_manifest(c)
    assert c.train.dtype == np.uint8 and c.train.size > 0
    blob = b"".join(c.split(s).tobytes() for s in lmdata.SPLITS)
    assert b"not stdlib" not in blob
    if name == "text":
        assert b"Return x plus" in blob and b"return x + " not in blob
        assert c.manifest["source"]["pydoc_topics"]
    else:
        assert b"def f" in blob
    docs = sum(c.manifest["splits"][s]["documents"] for s in lmdata.SPLITS)
    assert docs >= 40
    again = lmdata._default_corpus(name, root=root, cache=tmp_path / "cache")
    assert again.manifest == c.manifest and np.array_equal(again.test, c.test)
    # a damaged cache file is detected by its sha256 and rebuilt
    folder = next((tmp_path / "cache").iterdir())
    (folder / "train.bin").write_bytes(b"garbage")
    fixed = lmdata._default_corpus(name, root=root, cache=tmp_path / "cache")
    assert np.array_equal(fixed.train, c.train)


def test_split_of_is_stable_and_roughly_90_5_5():
    names = [f"doc{i}" for i in range(4000)]
    splits = [lmdata.split_of(n) for n in names]
    assert splits == [lmdata.split_of(n) for n in names]
    frac = {s: splits.count(s) / len(names) for s in lmdata.SPLITS}
    assert 0.85 < frac["train"] < 0.95 and 0.03 < frac["val"] < 0.07


def test_enwik8_standard_split(tmp_path):
    p = tmp_path / "enwik8"
    with open(p, "wb") as f:  # a sparse 100M-byte file with markers at the split points
        f.truncate(lmdata.ENWIK8_BYTES)
        f.seek(90_000_000)
        f.write(b"V")
        f.seek(95_000_000)
        f.write(b"T")
    c = lmdata.read_enwik8(p)
    assert (c.train.size, c.val.size, c.test.size) == (90_000_000, 5_000_000, 5_000_000)
    assert c.val[0] == ord("V") and c.test[0] == ord("T") and c.train[-1] == 0
    _check_manifest(c)


def test_enwik8_small_and_zip(tmp_path):
    raw = bytes(range(256)) * 40
    (tmp_path / "e").write_bytes(raw)
    c = lmdata.read_enwik8(tmp_path / "e")
    assert (c.train.size, c.val.size) == (len(raw) * 90 // 100, len(raw) * 5 // 100)
    assert c.train.tobytes() + c.val.tobytes() + c.test.tobytes() == raw
    with zipfile.ZipFile(tmp_path / "enwik8.zip", "w") as z:
        z.writestr("enwik8", raw)
    z = lmdata.load_corpus(f"enwik8:{tmp_path / 'enwik8.zip'}")
    assert z.manifest["splits"] == c.manifest["splits"]
    with pytest.raises(QsaError):
        lmdata.load_corpus(f"enwik8:{tmp_path / 'missing'}")


def test_codeparrot_jsonl_gz_and_errors(tmp_path):
    recs = [{"repo_name": f"r{i}", "content": f"def f{i}():\n    return {i}\n"} for i in range(60)]
    (tmp_path / "cp").mkdir()
    with gzip.open(tmp_path / "cp" / "part0.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in recs[:30]) + "\n")
    (tmp_path / "cp" / "part1.jsonl").write_text("\n".join(json.dumps(r) for r in recs[30:]))
    c = lmdata.load_corpus(f"codeparrot:{tmp_path / 'cp'}")
    _check_manifest(c)
    assert sum(c.manifest["splits"][s]["documents"] for s in lmdata.SPLITS) == 60
    blob = b"".join(c.split(s).tobytes() for s in lmdata.SPLITS)
    assert all(f"return {i}\n".encode() in blob for i in range(60))
    (tmp_path / "bad.jsonl").write_text('{"text": "no content field"}\n')
    with pytest.raises(FormatError, match="content"):
        lmdata.read_codeparrot(tmp_path / "bad.jsonl")


def test_codeparrot_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": [f"x = {i}\n" for i in range(50)]}),
                   tmp_path / "d.parquet")
    c = lmdata.read_codeparrot(tmp_path / "d.parquet")
    assert sum(c.manifest["splits"][s]["documents"] for s in lmdata.SPLITS) == 50


def test_folder_reader_skips_binary_and_hidden(tmp_path):
    for i in range(30):
        (tmp_path / f"note{i}.txt").write_text(f"note number {i}\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: hidden\n")
    c = lmdata.load_corpus(f"folder:{tmp_path}")
    blob = b"".join(c.split(s).tobytes() for s in lmdata.SPLITS)
    assert b"note number 7" in blob and b"\x00" not in blob and b"hidden" not in blob
    with pytest.raises(QsaError, match="not understood"):
        lmdata.load_corpus("wikipedia")


def test_linuxdoc_reader_leaves_out_translations(tmp_path):
    root = tmp_path / "linux-doc-6.1" / "html" / "_sources"
    for i in range(60):
        sub = root / ("admin-guide" if i % 2 else "networking")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"page{i}.rst.txt").write_text(f"Page {i}\n=======\n\nThe kernel does {i}.\n")
    (root / "translations" / "zh_CN").mkdir(parents=True)
    (root / "translations" / "zh_CN" / "index.rst.txt").write_text("翻译 " * 50)
    c = lmdata.load_corpus(f"linuxdoc:{root}")
    _check_manifest(c)
    blob = b"".join(c.split(s).tobytes() for s in lmdata.SPLITS)
    assert "翻译".encode() not in blob and b"The kernel does 7." in blob
    assert sum(c.manifest["splits"][s]["documents"] for s in lmdata.SPLITS) == 60
    src = c.manifest["source"]
    assert src["debian_package"] == "linux-doc-6.1" and src["excluded"] == "translations/"
    with pytest.raises(QsaError, match="not a folder"):
        lmdata.load_corpus(f"linuxdoc:{tmp_path / 'nowhere'}")


def test_linuxdoc_from_the_debian_package():
    """The English corpus as Debian's linux-doc-6.1 installs it: >= 20 MB of English prose."""
    import glob

    from syspkgs import require

    require([] if glob.glob(lmdata.LINUXDOC_GLOB) else [lmdata.LINUXDOC_PACKAGE],
            "the linuxdoc corpus")
    c = lmdata.load_corpus("linuxdoc")
    total = sum(c.manifest["splits"][s]["bytes"] for s in lmdata.SPLITS)
    assert total >= 20_000_000
    sample = c.test[:200_000].tobytes()
    assert sample.count(b" the ") > 500  # English prose
    assert sum(b > 127 for b in sample) < 0.01 * len(sample)
