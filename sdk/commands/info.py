"""`qsa info`: the models this install knows and which runtimes are available."""

from __future__ import annotations

RUNTIME_MODULES = {
    "torch": "torch",
    "executorch": "executorch.runtime",
    "litert": "ai_edge_litert.interpreter",
    "tflm": "tflite_micro",
    "onnx": "onnxruntime",
}


def register(sub) -> None:
    p = sub.add_parser("info", help="list models, presets and available runtimes")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    import importlib.util
    import json

    from qsa._version import __version__
    from qsa.hub import shipped_weights
    from qsa.models.registry import build_model, preset_config, preset_names

    models = []
    for name in preset_names():
        m = build_model(preset_config(name))
        w = shipped_weights(name)
        models.append({"name": name, "params": sum(p.numel() for p in m.parameters()),
                       "weights": "shipped" if w is not None else "untrained",
                       "weights_file": str(w) if w is not None else None})
    runtimes = {}
    for rt, mod in RUNTIME_MODULES.items():
        try:
            runtimes[rt] = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            runtimes[rt] = False
    if args.json:
        print(json.dumps({"version": __version__, "models": models, "runtimes": runtimes}))
        return 0
    print(f"qsa {__version__}")
    print("models (weights: shipped = trained weights in this install; untrained = a preset "
          "to `qsa train`):")
    for m in models:
        print(f"  {m['name']:<24} {m['params']:>10,d} params  {m['weights']}")
    print("runtimes:")
    for rt, ok in runtimes.items():
        print(f"  {rt:<12} {'available' if ok else 'not installed (pip install qsa[' + rt + '])'}")
    return 0
