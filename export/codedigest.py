"""What decides an exported artifact besides the weights: the source of the code that builds
its graph. Caches of exported artifacts (``qsa compare``, ``qsa live``, the peers bench) key
on this digest, so an edited exporter, layer or model file, in a release or an editable
checkout, never reuses an artifact the old code wrote."""

from __future__ import annotations

import hashlib
from pathlib import Path

# the packages whose code shapes an exported graph: exporters and quantisers, the layers and
# models they rewrite, the packed-weight quantisation, the DSP of the host/network split
GRAPH_PACKAGES = ("qsa.export", "qsa.layers", "qsa.models", "qsa.quantize", "qsa.audio")


def graph_roots() -> list[Path]:
    """The folders of :data:`GRAPH_PACKAGES`, found without importing them (they import
    torch; ``qsa live`` keys its export cache on this digest before it knows whether it
    needs torch at all)."""
    import importlib.util

    return [Path(importlib.util.find_spec(n).origin).parent for n in GRAPH_PACKAGES]


def source_digest(roots: list[Path]) -> str:
    """sha256 over every .py file (relative name and bytes) under ``roots``."""
    h = hashlib.sha256()
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def graph_code_digest() -> str:
    """:func:`source_digest` of :data:`GRAPH_PACKAGES` as installed."""
    return source_digest(graph_roots())
