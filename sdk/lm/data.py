"""Byte corpora for the LMs: the embedded default corpora and readers for local datasets.

A corpus is three uint8 arrays (train / val / test) plus a manifest (JSON) that records where
the bytes came from, the split rule, and the size and sha256 of each split.

Specs accepted by ``load_corpus`` (and ``qsa lm train --data``):

* ``text`` - English: every docstring (module, class, function) of the Python standard
  library's source, then the ``pydoc_data.topics`` help texts; built at run time from the
  running interpreter's stdlib, so it needs no download.
* ``code`` - Python code: the standard library's ``.py`` files, byte for byte (28.8 MB with
  CPython 3.11; the stand-in for CodeParrot, which needs a download).
* ``linuxdoc`` / ``linuxdoc:PATH`` - English prose: the reStructuredText sources of the Linux
  kernel documentation as the Debian package ``linux-doc-6.1`` installs them (Debian main,
  ``apt-get install linux-doc-6.1``; 21.4 MB from 2,841 files, translations/ left out), read
  from /usr/share/doc/linux-doc-*/html/_sources or PATH (a folder of ``*.rst.txt`` files).
* ``enwik8:PATH`` - the raw 100 MB enwik8 file (or enwik8.zip); standard split of the raw bytes:
  first 90M train, next 5M val, last 5M test (other sizes split 90/5/5 proportionally).
* ``codeparrot:PATH`` - a CodeParrot dump: a .jsonl / .jsonl.gz / .json.gz / .parquet file or a
  folder of them; each record's ``content`` field as UTF-8 bytes.
* ``folder:PATH`` - every text file under a folder (files with a NUL byte in their first 8 KiB
  are skipped as binary).

Document-level corpora (all but enwik8) assign each document to a split by the sha256 of its
name (5% test, 5% val, 90% train), so a split never changes when other documents come or go;
documents are joined in name order with a blank line between them. The default corpora are
cached under ``$QSA_CACHE`` (default ``~/.cache/qsa``)/lm and re-verified against the manifest's
sha256 on every load.
"""

from __future__ import annotations

import ast
import dataclasses
import gzip
import hashlib
import json
import os
import sys
import sysconfig
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..errors import FormatError, QsaError
from ..fileio import atomic_write_bytes, atomic_write_text

SPLITS = ("train", "val", "test")
SEPARATOR = b"\n\n"
ENWIK8_BYTES = 100_000_000
MANIFEST_VERSION = 1


@dataclasses.dataclass
class Corpus:
    name: str
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    manifest: dict

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise QsaError(f"split {name!r}; expected one of {SPLITS}")
        return getattr(self, name)


def _sha(data: bytes | np.ndarray) -> str:
    return hashlib.sha256(memoryview(data).tobytes() if isinstance(data, np.ndarray)
                          else data).hexdigest()


def split_of(name: str) -> str:
    """The split of a document, from the sha256 of its name: 5% test, 5% val, 90% train."""
    bucket = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big") % 100
    return "test" if bucket < 5 else "val" if bucket < 10 else "train"


def corpus_from_documents(name: str, docs: Iterable[tuple[str, bytes]], source: dict) -> Corpus:
    """Split (name, bytes) documents by ``split_of`` and join each split in name order."""
    parts: dict[str, list[tuple[str, bytes]]] = {s: [] for s in SPLITS}
    for doc_name, data in docs:
        if data:
            parts[split_of(doc_name)].append((doc_name, data))
    arrays, info = {}, {}
    for s in SPLITS:
        items = sorted(parts[s])
        blob = SEPARATOR.join(d for _, d in items)
        arrays[s] = np.frombuffer(blob, dtype=np.uint8)
        names = "\n".join(n for n, _ in items).encode("utf-8")
        info[s] = {"bytes": len(blob), "sha256": _sha(blob), "documents": len(items),
                   "names_sha256": _sha(names)}
    if not info["train"]["bytes"]:
        raise QsaError(f"corpus {name!r} has no training bytes; is the source empty? ({source})")
    manifest = {"version": MANIFEST_VERSION, "corpus": name, "source": source,
                "split_rule": "sha256(document name) % 100: <5 test, <10 val, else train; "
                              "documents joined in name order with b'\\n\\n'",
                "splits": info}
    return Corpus(name, arrays["train"], arrays["val"], arrays["test"], manifest)


def corpus_from_bytes(name: str, data: bytes, source: dict,
                      sizes: tuple[int, int] | None = None) -> Corpus:
    """Contiguous split of one byte string: (train, val) sizes, the rest test; 90/5/5 default."""
    n = len(data)
    n_train, n_val = sizes or (n * 90 // 100, n * 5 // 100)
    if n_train + n_val >= n or n_train <= 0:
        raise QsaError(f"{name}: {n} bytes are too few to split into train/val/test")
    arr = np.frombuffer(data, dtype=np.uint8)
    cuts = {"train": arr[:n_train], "val": arr[n_train:n_train + n_val],
            "test": arr[n_train + n_val:]}
    info = {s: {"bytes": int(a.size), "sha256": _sha(a)} for s, a in cuts.items()}
    manifest = {"version": MANIFEST_VERSION, "corpus": name, "source": source,
                "split_rule": f"contiguous bytes: train [0, {n_train}), val [{n_train}, "
                              f"{n_train + n_val}), test [{n_train + n_val}, {n})",
                "splits": info}
    return Corpus(name, cuts["train"], cuts["val"], cuts["test"], manifest)


# -- the embedded default corpora ----------------------------------------------------------


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py")
                  if "site-packages" not in p.parts and "dist-packages" not in p.parts)


def stdlib_code_documents(root: Path | None = None) -> Iterator[tuple[str, bytes]]:
    root = root or stdlib_root()
    for p in _stdlib_files(root):
        yield p.relative_to(root).as_posix(), p.read_bytes()


def stdlib_text_documents(root: Path | None = None) -> Iterator[tuple[str, bytes]]:
    """Docstrings of each stdlib module (one document per file), then the pydoc topics."""
    root = root or stdlib_root()
    for p in _stdlib_files(root):
        try:
            tree = ast.parse(p.read_bytes())
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue  # a few test files hold deliberately invalid source
        docs = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef):
                d = ast.get_docstring(node)
                if d:
                    docs.append(d)
        if docs:
            yield p.relative_to(root).as_posix(), "\n\n".join(docs).encode("utf-8", "replace")
    from pydoc_data import topics

    for key in sorted(topics.topics):
        yield f"pydoc_data/topics/{key}", topics.topics[key].encode("utf-8", "replace")


DEFAULT_CORPORA = {"text": stdlib_text_documents, "code": stdlib_code_documents}


def cache_dir() -> Path:
    return Path(os.environ.get("QSA_CACHE", Path.home() / ".cache" / "qsa")) / "lm"


def _default_corpus(name: str, root: Path | None = None, cache: Path | None = None) -> Corpus:
    root = root or stdlib_root()
    ver = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    tag = hashlib.sha256(str(root).encode()).hexdigest()[:8]
    folder = (cache or cache_dir()) / f"stdlib-{name}-py{ver}-{tag}"
    mpath = folder / "manifest.json"
    if mpath.exists():
        manifest = json.loads(mpath.read_text())
        arrays = {}
        for s in SPLITS:
            data = (folder / f"{s}.bin").read_bytes() if (folder / f"{s}.bin").exists() else b""
            if _sha(data) != manifest["splits"][s]["sha256"]:
                break  # stale or damaged cache: rebuild below
            arrays[s] = np.frombuffer(data, dtype=np.uint8)
        else:
            return Corpus(name, arrays["train"], arrays["val"], arrays["test"], manifest)
    source = {"kind": f"python-stdlib-{name}", "python": ver, "stdlib": str(root),
              "pydoc_topics": name == "text"}
    corpus = corpus_from_documents(name, DEFAULT_CORPORA[name](root), source)
    for s in SPLITS:
        atomic_write_bytes(folder / f"{s}.bin", corpus.split(s).tobytes())
    atomic_write_text(mpath, json.dumps(corpus.manifest, indent=1) + "\n")
    return corpus


# -- readers for local datasets --------------------------------------------------------------


def read_enwik8(path: str | os.PathLike) -> Corpus:
    path = Path(path)
    if not path.exists():
        raise QsaError(f"enwik8 file {path} not found; pass the raw enwik8 file or enwik8.zip")
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if not n.endswith("/")]
            if not names:
                raise FormatError(f"{path} holds no file; expected enwik8 inside")
            data = z.read("enwik8" if "enwik8" in names else names[0])
    else:
        data = path.read_bytes()
    sizes = (90_000_000, 5_000_000) if len(data) == ENWIK8_BYTES else None
    return corpus_from_bytes("enwik8", data, {"kind": "enwik8", "path": str(path),
                                              "bytes": len(data)}, sizes)


def _records(path: Path) -> Iterator[tuple[str, str]]:
    name = path.name
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise QsaError(f"reading {path} needs pyarrow: pip install pyarrow") from None
        table = pq.read_table(path, columns=["content"])
        for i, v in enumerate(table.column("content").to_pylist()):
            yield f"{name}:{i}", v
        return
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise FormatError(f"{path}:{i + 1} is not a JSON line ({e})") from None
            if not isinstance(rec, dict) or "content" not in rec:
                raise FormatError(f"{path}:{i + 1} has no 'content' field (CodeParrot records "
                                  "carry the file text in 'content')")
            yield f"{name}:{i}", rec["content"]


_CP_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".json", ".parquet")


def read_codeparrot(path: str | os.PathLike) -> Corpus:
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.name.endswith(_CP_SUFFIXES))
    elif path.exists():
        files = [path]
    else:
        raise QsaError(f"CodeParrot path {path} not found")
    if not files:
        raise QsaError(f"no {'/'.join(_CP_SUFFIXES)} files under {path}")

    def docs():
        for f in files:
            for n, text in _records(f):
                yield n, (text or "").encode("utf-8", "replace")

    return corpus_from_documents("codeparrot", docs(), {"kind": "codeparrot", "path": str(path),
                                                        "files": len(files)})


def read_folder(path: str | os.PathLike) -> Corpus:
    path = Path(path)
    if not path.is_dir():
        raise QsaError(f"{path} is not a folder; folder:PATH takes a directory of text files")

    def docs():
        for p in sorted(path.rglob("*")):
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts):
                data = p.read_bytes()
                if b"\x00" not in data[:8192]:
                    yield p.relative_to(path).as_posix(), data

    return corpus_from_documents(f"folder:{path.name}", docs(), {"kind": "folder",
                                                                 "path": str(path)})


LINUXDOC_GLOB = "/usr/share/doc/linux-doc-*/html/_sources"
LINUXDOC_PACKAGE = "linux-doc-6.1"


def _debian_version(package: str) -> str | None:
    import shutil
    import subprocess

    if not shutil.which("dpkg-query"):
        return None
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                       text=True, check=False)
    return r.stdout.strip() or None if r.returncode == 0 else None


def read_linuxdoc(path: str | os.PathLike | None = None) -> Corpus:
    """The English kernel documentation (rST sources, translations/ left out), one document
    per file, split by ``split_of``."""
    import glob

    if path is None:
        found = sorted(glob.glob(LINUXDOC_GLOB))
        if not found:
            raise QsaError(f"no kernel documentation under {LINUXDOC_GLOB}; install it with "
                           f"`apt-get install {LINUXDOC_PACKAGE}` (Debian main) or pass "
                           "linuxdoc:PATH (a folder of .rst.txt files)")
        root = Path(found[-1])
    else:
        root = Path(path)
        if not root.is_dir():
            raise QsaError(f"{root} is not a folder; linuxdoc:PATH takes the _sources folder "
                           "of the kernel documentation")
    files = sorted(p for p in root.rglob("*.txt")
                   if p.is_file() and p.relative_to(root).parts[0] != "translations")
    if not files:
        raise QsaError(f"no .txt files under {root}; is it the documentation's _sources folder?")

    def docs():
        for p in files:
            yield p.relative_to(root).as_posix(), p.read_bytes()

    package = next((part for part in root.parts if part.startswith("linux-doc-")), None)
    source = {"kind": "linux-doc-rst", "path": str(root), "files": len(files),
              "excluded": "translations/", "debian_package": package,
              "debian_version": _debian_version(package) if package else None}
    return corpus_from_documents("linuxdoc", docs(), source)


def load_corpus(spec: str) -> Corpus:
    """A corpus from its spec (see the module docstring)."""
    if spec in DEFAULT_CORPORA:
        return _default_corpus(spec)
    if spec == "linuxdoc":
        return read_linuxdoc()
    kind, sep, arg = spec.partition(":")
    readers = {"enwik8": read_enwik8, "codeparrot": read_codeparrot, "folder": read_folder,
               "linuxdoc": read_linuxdoc}
    if not sep or kind not in readers or not arg:
        raise QsaError(
            f"data spec {spec!r} not understood; use 'text', 'code', 'linuxdoc', "
            "'linuxdoc:PATH', 'enwik8:PATH', 'codeparrot:PATH' or 'folder:PATH'"
        )
    return readers[kind](arg)


def write_manifest(corpus: Corpus, path: str | os.PathLike) -> None:
    atomic_write_text(path, json.dumps(corpus.manifest, indent=1) + "\n")
