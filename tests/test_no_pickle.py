"""No pickle anywhere: scan the code for unsafe deserialisation."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["sdk", "quantize", "export", "apps", "bench"]


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f"{getattr(f.value, 'id', getattr(f.value, 'attr', ''))}.{f.attr}"
                if isinstance(f, ast.Attribute)
                else getattr(f, "id", "")
            )
            yield name, node


def _kw(node, key):
    for k in node.keywords:
        if k.arg == key and isinstance(k.value, ast.Constant):
            return k.value.value
    return None


def unsafe_loads(source: str) -> list[str]:
    problems = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n in ("pickle", "cPickle", "dill", "joblib", "cloudpickle") for n in names):
                problems.append(f"line {node.lineno}: imports a pickle module")
    for name, node in _calls(tree):
        if name == "torch.load" and _kw(node, "weights_only") is not True:
            problems.append(f"line {node.lineno}: torch.load without weights_only=True")
        if name == "torch.save":
            problems.append(f"line {node.lineno}: torch.save writes pickle; use safetensors")
        numpy_load = name.endswith(".load") and name.split(".")[0] in ("np", "numpy")
        if numpy_load and _kw(node, "allow_pickle") is True:
            problems.append(f"line {node.lineno}: np.load(allow_pickle=True)")
    return problems


def test_scanner_catches_unsafe_patterns():
    bad = "import pickle\nimport torch\ntorch.load('x')\ntorch.save(m, 'y')\n"
    assert len(unsafe_loads(bad)) == 3
    assert unsafe_loads("import torch\ntorch.load('x', weights_only=True)\n") == []


def test_codebase_has_no_unsafe_loads():
    found = {}
    for d in SCANNED:
        for p in sorted((ROOT / d).rglob("*.py")):
            probs = unsafe_loads(p.read_text())
            if probs:
                found[str(p.relative_to(ROOT))] = probs
    assert not found, found
