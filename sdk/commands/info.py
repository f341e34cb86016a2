"""`qsa info`: the models this install knows, which have shipped weights, and the runtimes.

Answers without importing torch or building a model (4-5 s of CPU for the 15 presets): the
parameter counts come from ``PRESET_PARAMS``, which tests/test_newcomer_cli.py checks against
``preset_names()`` and the built models (a new preset fails that test until it is added).
"""

from __future__ import annotations

RUNTIME_MODULES = {
    "torch": "torch",
    "executorch": "executorch.runtime",
    "litert": "ai_edge_litert.interpreter",
    "tflm": "tflite_micro",
    "onnx": "onnxruntime",
}

# Every registered preset -> its parameter count (trainable and frozen, as built).
PRESET_PARAMS = {
    "lm-circuits-1m": 1_037_696,
    "lm-circuits-5m": 4_885_760,
    "lm-kuramoto-1m": 1_037_736,
    "lm-kuramoto-1m-lagged": 1_037_736,
    "lm-kuramoto-5m": 4_885_856,
    "lm-kuramoto-5m-lagged": 4_885_856,
    "lm-quaternion-1m": 1_037_696,
    "lm-quaternion-5m": 4_885_760,
    "lm-transformer-1m": 1_037_696,
    "lm-transformer-5m": 4_885_760,
    "metric-discriminator": 181_650,
    "qcgan-0.89m": 894_752,
    "qcgan-0.89m-causal": 894_752,
    "qcgan-35k": 34_662,
    "qtransformer-small": 17_952,
}


def register(sub) -> None:
    p = sub.add_parser("info", help="list models (shipped weights or not) and runtimes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def model_table() -> list[dict]:
    """One row per preset: name, parameter count, shipped or untrained, weights file."""
    from qsa.hub import shipped_weights

    rows = []
    for name, params in sorted(PRESET_PARAMS.items()):
        w = shipped_weights(name)
        rows.append({"name": name, "params": params,
                     "weights": "shipped" if w is not None else "untrained",
                     "weights_file": str(w) if w is not None else None})
    return rows


def installed(module: str) -> bool:
    """Whether ``module`` (dotted) can be imported, found without importing it or its
    packages (``importlib.util.find_spec("a.b")`` imports ``a``)."""
    import importlib.machinery
    import importlib.util

    top, *subs = module.split(".")
    spec = importlib.util.find_spec(top)
    for name in subs:
        if spec is None or spec.submodule_search_locations is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(
            f"{spec.name}.{name}", list(spec.submodule_search_locations))
    return spec is not None


def run(args) -> int:
    import json

    from qsa._version import __version__

    models = model_table()
    runtimes = {rt: installed(mod) for rt, mod in RUNTIME_MODULES.items()}
    if args.json:
        print(json.dumps({"version": __version__, "models": models, "runtimes": runtimes}))
        return 0
    print(f"qsa {__version__}")
    print("models (weights: shipped = trained weights come with this install; untrained = "
          "a preset to `qsa train`):")
    for m in models:
        print(f"  {m['name']:<24} {m['params']:>10,d} params  {m['weights']}")
    print("runtimes:")
    for rt, ok in runtimes.items():
        print(f"  {rt:<12} {'available' if ok else 'not installed (pip install qsa[' + rt + '])'}")
    return 0
