"""qsa.apps.compare: every model x runtime x precision on the same utterances (``qsa compare``).

    res = compare(["qcgan-35k"], "synth:data/synth", ["torch", "onnx"], ["fp32", "int8"], "cmp")
    print(res.markdown())

Each combination is exported once (``qsa.export.export_model``, verified against PyTorch by
the exporter) into ``OUT/artifacts/<model>/<runtime>-<precision>/`` and reused by later runs
while the model's weights, the export code and the export settings are unchanged (the key is
in ``compare.json`` next to the artifact, with the artifact's sha256). The ``torch`` runtime's
artifact is the packed model file (``.qsa``) at that precision.

Every utterance is then streamed hop by hop through the runtime, as a device runs it, each
step timed; the output is shifted by the model's streaming delay so it lines up with the
clean reference, written to ``OUT/enhanced/<model>/<runtime>-<precision>/NAME.wav`` (float)
and scored with ``qsa.metrics.batch_metrics`` (PESQ-WB, PESQ-NB, STOI, SI-SDR); with
``dnsmos=True`` (``--dnsmos``) also DNSMOS OVRL (P.835, no reference; ``qsa.metrics.dnsmos``).
ΔPESQ-WB is against the same model streamed by torch fp32, which is always run as the
reference. ``data`` may be any paired ``--data`` spec, e.g. ``real:DIR`` (``qsa data real``).

The ``c`` runtime (int8 only) is the generated C99 build (``qsa export --target c``:
``qsa.export.c_export``, the TFLite-Micro integers with the C DSP around them, PCM in and
out), compiled with the host cc and called hop by hop through ctypes; it needs a C compiler.

A combination that fails to export or run is a row with ``status="failed"`` and the error
message; the others go on. Outputs (each written atomically): ``results.json``,
``results.md`` (the table) and ``pesq_wb.png``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qsa.errors import ConfigError, QsaError
from qsa.fileio import ensure_dir

RUNTIMES = ("torch", "onnx", "executorch", "litert", "tflm", "c")
PRECISIONS = ("fp32", "int8")
SCORES = ("pesq_wb", "pesq_nb", "stoi", "si_sdr")
SR = 16000
# What each runtime needs to export *and* run (the default runtimes are those that import).
RUNTIME_PACKAGES = {
    "torch": ("torch",),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
    "executorch": ("executorch.exir", "executorch.runtime"),
    "litert": ("litert_torch", "ai_edge_litert.interpreter"),
    "tflm": ("litert_torch", "tflite_micro"),
    "c": ("litert_torch", "tflite_micro"),  # and a host C compiler (missing_packages)
}
# runtimes that run only some precisions (the others are left out of their rows)
RUNTIME_PRECISIONS = {"c": ("int8",)}
RESULTS_VERSION = 1
CACHE_FILE = "compare.json"
PLOT_FILE = "pesq_wb.png"


def missing_packages(runtime: str) -> list[str]:
    """The packages ``runtime`` needs that are not installed here (empty: usable). Only the
    top-level package is looked up, so nothing heavy (torch) is imported."""
    out = []
    for mod in RUNTIME_PACKAGES[runtime]:
        try:
            ok = importlib.util.find_spec(mod.split(".")[0]) is not None
        except (ModuleNotFoundError, ValueError):
            ok = False
        if not ok:
            out.append(mod)
    if runtime == "c":
        from qsa.export.c_export import host_cc

        if host_cc() is None:
            out.append("a host C compiler (cc / gcc / clang)")
    return out


def available_runtimes() -> list[str]:
    """Runtimes whose export and run packages are installed, in ``RUNTIMES`` order."""
    return [r for r in RUNTIMES if not missing_packages(r)]


def model_digest(model) -> str:
    """sha256 of a model's config and every tensor of its state dict (names, dtypes, bytes)."""
    import torch

    h = hashlib.sha256()
    cfg = getattr(model, "config", None)
    if dataclasses.is_dataclass(cfg):
        from qsa.config import config_to_dict

        h.update(json.dumps(config_to_dict(cfg), sort_keys=True, default=str).encode())
    h.update(type(model).__name__.encode())
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def export_code_digest() -> str:
    """Digest of the code that decides what an artifact holds (exporters, quantisers,
    calibration, layers, models, DSP; :mod:`qsa.export.codedigest`): an artifact cached by
    other code is rebuilt."""
    from qsa.export.codedigest import graph_code_digest

    return graph_code_digest()


@dataclass
class Row:
    """One model x runtime x precision (or the noisy input: runtime "noisy")."""

    model: str
    runtime: str
    precision: str
    status: str = "pending"  # ok | failed | input
    error: str | None = None
    pesq_wb: float = math.nan
    pesq_nb: float = math.nan
    stoi: float = math.nan
    si_sdr: float = math.nan
    dnsmos_ovrl: float = math.nan  # with dnsmos=True only
    delta_pesq_wb: float = math.nan  # vs torch fp32 of the same model
    bytes: int | None = None
    hop_ms_median: float | None = None
    hop_ms_p99: float | None = None
    rtf: float | None = None
    artifact: str | None = None
    cached: bool = False
    export_s: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    items: list[dict] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.model}/{self.runtime}-{self.precision}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class CompareResults:
    """The rows (noisy input first, then per model torch fp32 first) and what was compared."""

    rows: list[Row]
    data: str
    split: str
    names: list[str]
    models: dict[str, dict]
    runtimes: list[str]
    precisions: list[str]
    out_dir: Path
    seconds: float = 0.0
    dnsmos: bool = False  # rows carry DNSMOS OVRL

    def row(self, model: str, runtime: str, precision: str) -> Row:
        for r in self.rows:
            if (r.model, r.runtime, r.precision) == (model, runtime, precision):
                return r
        raise KeyError(f"no row {model}/{runtime}-{precision}")

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.status == "failed"]

    def to_dict(self) -> dict:
        return {
            "version": RESULTS_VERSION,
            "data": self.data,
            "split": self.split,
            "n_items": len(self.names),
            "items": self.names,
            "sample_rate": SR,
            "metrics": list(SCORES) + (["dnsmos_ovrl"] if self.dnsmos else []),
            "models": self.models,
            "runtimes": self.runtimes,
            "precisions": self.precisions,
            "seconds": round(self.seconds, 1),
            "rows": [r.to_dict() for r in self.rows],
        }

    def markdown(self) -> str:
        return results_markdown(self)


# --------------------------------------------------------------------------- inputs


def resolve_data(data, split: str = "test", limit: int = 0):
    """``data`` (a ``--data`` spec string, a PairSet or a list of Pair) -> list of Pair with
    clean references; QsaError when it is missing, empty or noisy-only."""
    from qsa.data.readers import parse_data_spec

    if isinstance(data, str | os.PathLike):
        from qsa.data.readers import DATA_KINDS

        spec = str(data)
        kind, _, rest = spec.partition(":")
        folder = rest if kind in DATA_KINDS and not Path(spec).exists() else spec
        if folder and not Path(folder).exists():
            raise QsaError(
                f"--data {spec!r}: {folder} does not exist; expected synth:DIR (made by "
                "`qsa data synth DIR`), real:DIR (`qsa data real DIR`), voicebank:DIR, dns:DIR "
                "or a folder with clean/ and noisy/; check the path"
            )
        try:
            if kind not in DATA_KINDS and (Path(spec) / "clean").is_dir() and (
                    Path(spec) / "noisy").is_dir():  # a plain DIR of clean/ + noisy/ pairs
                from qsa.data.readers import read_synth

                pairs = list(read_synth(spec, split=split))
            else:
                pairs = list(parse_data_spec(spec, split=split))
        except QsaError as e:
            raise QsaError(
                f"--data {spec!r}: {e}; compare needs noisy/clean pairs with the same names "
                "(synth:DIR, real:DIR, voicebank:DIR, dns:DIR or DIR/clean + DIR/noisy)"
            ) from None
    else:
        spec = getattr(data, "description", None) or f"{len(data)} pairs"
        pairs = list(data)
    if limit and limit > 0:
        pairs = pairs[:limit]
    if not pairs:
        raise QsaError(f"--data {spec!r}: the data set is empty; point --data at a folder "
                       "with noisy/clean pairs (or raise --limit)")
    unpaired = [p.name for p in pairs if p.clean is None]
    if unpaired:
        raise QsaError(
            f"--data {spec!r}: {len(unpaired)} item(s) have no clean reference (e.g. "
            f"{unpaired[:3]}); compare scores PESQ/STOI/SI-SDR against clean speech: use a "
            "paired set (synth:DIR, voicebank:DIR, dns:DIR with clean/)"
        )
    return pairs


def check_choices(runtimes: Sequence[str], precisions: Sequence[str]) -> None:
    bad = [r for r in runtimes if r not in RUNTIMES]
    if bad:
        raise ConfigError(f"unknown runtime(s) {bad}; expected some of {list(RUNTIMES)} "
                          "(e.g. --runtimes torch,onnx,litert)")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise ConfigError(f"unknown precision(s) {bad}; expected some of {list(PRECISIONS)} "
                          "(e.g. --precisions fp32,int8)")
    if not runtimes or not precisions:
        raise ConfigError("nothing to compare: give at least one runtime and one precision")
    for r in runtimes:
        only = RUNTIME_PRECISIONS.get(r)
        if only and not set(only) & set(precisions):
            raise ConfigError(f"runtime {r!r} runs only {'/'.join(only)}; add it to "
                              f"--precisions (e.g. --precisions fp32,{only[0]})")
    for r in runtimes:
        miss = missing_packages(r)
        if miss:
            raise ConfigError(
                f"runtime {r!r} needs {miss}, which do not import here; install them "
                f"(pip install 'qsa[{r}]') or leave {r} out of --runtimes "
                f"(available: {available_runtimes()})"
            )


def model_label(spec: str) -> str:
    p = Path(str(spec))
    if p.suffix in (".qsa", ".safetensors") or p.is_file():
        name = p.name
        for suffix in (".safetensors", ".qsa", ".int8", ".fp32"):
            name = name.removesuffix(suffix)
        return name or "model"
    return str(spec)


def load_models(specs: Sequence[str], allow_untrained: bool) -> dict[str, tuple[Any, str]]:
    """{label: (fp32 model, spec)}; a bad name or file raises before any work is done."""
    from qsa.hub import load, shipped_weights

    if not specs:
        raise ConfigError("no model given; pass one or more names or packed model files "
                          "(see `qsa info`)")
    out: dict[str, tuple[Any, str]] = {}
    for spec in specs:
        spec = str(spec)
        label = model_label(spec)
        base, k = label, 2
        while label in out:
            label, k = f"{base}-{k}", k + 1
        is_file = Path(spec).is_file()
        if not is_file and Path(spec).suffix in (".qsa", ".safetensors"):
            raise QsaError(f"model file {spec} does not exist; check the path")
        if not is_file and shipped_weights(spec) is None and not allow_untrained:
            from qsa.models.registry import preset_names

            if spec in preset_names():
                raise ConfigError(
                    f"model {spec!r} has no shipped weights (it would be compared untrained); "
                    f"pass a packed model file, train it with `qsa train {spec}`, or pass "
                    "--allow-untrained"
                )
        out[label] = (load(spec, dequantize=True).eval(), spec)
    return out


# --------------------------------------------------------------------------- artifacts


def _cache_key(digest: str, runtime: str, precision: str, profile: str | None,
               calib_digest: str) -> dict:
    from qsa._version import __version__

    return {"model_sha256": digest, "runtime": runtime, "precision": precision,
            "profile": profile, "calib": calib_digest,
            "export_code_sha256": export_code_digest() if runtime != "torch" else None,
            "qsa_version": __version__}


class CachedExportFailure(QsaError):
    """This combination failed to export before, with the same model, code and settings."""


def _cached_artifact(folder: Path, key: dict) -> tuple[Path, dict] | None:
    meta_path = folder / CACHE_FILE
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != key:
            return None
        if meta.get("failed"):
            raise CachedExportFailure(
                f"{meta['failed']} (cached failure of an earlier run with the same model and "
                "export code; --rebuild retries it)")
        artifact = folder / meta["artifact"]
        from qsa.export.validate import sha256_file

        if not artifact.is_file() or sha256_file(artifact) != meta["artifact_sha256"]:
            return None
        report = meta.get("report") or {}
        if key["runtime"] != "torch":
            report = json.loads((folder / "report.json").read_text())
            if not report.get("verified"):
                return None
        return artifact, report
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_artifact(model, label: str, runtime: str, precision: str, folder: Path, *,
                   profile: str | None = None, calib=None, calib_digest: str = "default",
                   digest: str | None = None, rebuild: bool = False,
                   ) -> tuple[Path, dict, bool, float]:
    """(artifact, report, cached, export seconds) for one combination, cached in ``folder``.

    Raises whatever the export raises (``ExportError`` for a verified mismatch). A QsaError
    verdict is cached too (the same model and export code fail the same way): a later run
    raises ``CachedExportFailure`` at once instead of exporting for minutes again."""
    from qsa.fileio import atomic_write_text

    key = _cache_key(digest or model_digest(model), runtime, precision, profile, calib_digest)
    if not rebuild:
        hit = _cached_artifact(folder, key)
        if hit is not None:
            return hit[0], hit[1], True, 0.0
    t0 = time.perf_counter()
    if runtime == "torch":
        from qsa.quantize import save_packed

        artifact = folder / f"model.{precision}.qsa"
        save_packed(model, artifact, precision=precision, force=True)
        report = {"bytes": artifact.stat().st_size, "precision": precision}
    else:
        try:
            res = _export(model, runtime, precision, folder, calib, profile, label)
        except QsaError as e:
            failed = {"key": key, "failed": " ".join(str(e).split()) or type(e).__name__,
                      "export_seconds": round(time.perf_counter() - t0, 2)}
            atomic_write_text(folder / CACHE_FILE, json.dumps(failed, indent=1) + "\n")
            raise
        artifact, report = Path(res.artifact), res.report
    seconds = time.perf_counter() - t0
    from qsa.export.validate import sha256_file

    meta = {"key": key, "artifact": artifact.name, "artifact_sha256": sha256_file(artifact),
            "report": report if runtime == "torch" else None,
            "export_seconds": round(seconds, 2)}
    atomic_write_text(folder / CACHE_FILE, json.dumps(meta, indent=1) + "\n")
    return artifact, report, False, seconds


def _export(model, runtime: str, precision: str, folder: Path, calib, profile, label: str):
    """Export one combination other than torch into ``folder`` (an ExportResult)."""
    if runtime == "c":  # the generated C folder; its QEMU runs belong to `qsa export`
        from qsa.export.c_export import export_c

        return export_c(model, folder, model_name=label, force=True, calib=calib, mcu=())
    import warnings

    from qsa.export import export_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return export_model(model, runtime, precision, folder, calib=calib, profile=profile,
                            model_name=label, force=True)


def open_runtime(runtime: str, precision: str, artifact: Path, report: dict):
    from qsa.export import load_runtime

    if runtime == "torch":
        return load_runtime("torch", str(artifact), precision=precision)
    if runtime == "tflm":
        arena = (report.get("memory") or {}).get("arena_bytes")
        return load_runtime("tflm", artifact, arena_size=arena)
    if runtime == "c":
        from qsa.export.c_export import CRuntime

        return CRuntime(Path(artifact).parent)
    return load_runtime(runtime, artifact)


# --------------------------------------------------------------------------- streaming


def stream_aligned(rt, wave: np.ndarray, delay: int, times: list[float]) -> np.ndarray:
    """``wave`` streamed hop by hop through ``rt`` (each step's seconds appended to
    ``times``), the output advanced by ``delay`` samples: same length as ``wave``.

    The tail that flushes the delay is the input mirrored, not zeros: appended digital
    silence is not in the data (and only the last ``delay`` output samples depend on it)."""
    hop = rt.hop
    n = len(wave)
    steps = -(-(n + delay) // hop)  # ceil: enough hops to flush the delayed tail
    wave = np.asarray(wave, np.float32)
    x = np.pad(wave, (0, steps * hop - n), mode="reflect" if n > 1 else "edge")
    out = np.empty(steps * hop, np.float32)
    state = rt.init_state()
    clock = time.perf_counter
    for t in range(steps):
        t0 = clock()
        y, state = rt.step(x[t * hop : (t + 1) * hop], state)
        times.append(clock() - t0)
        out[t * hop : (t + 1) * hop] = y.reshape(-1)
    return out[delay : delay + n]


def _safe_name(name: str) -> str:
    return name.replace("/", "__").replace("\\", "__")


# --------------------------------------------------------------------------- main entry


def compare(
    models: Sequence[str],
    data,
    runtimes: Sequence[str] | None = None,
    precisions: Sequence[str] = PRECISIONS,
    out_dir: str | os.PathLike = "compare_out",
    *,
    split: str = "test",
    limit: int = 0,
    workers: int = 2,
    profiles: dict[str, str] | None = None,
    calib: list[np.ndarray] | None = None,
    allow_untrained: bool = False,
    rebuild: bool = False,
    threads: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    dnsmos: bool = False,
) -> CompareResults:
    """Compare ``models`` on ``data`` across ``runtimes`` x ``precisions`` (module docstring).

    ``runtimes`` None: every runtime whose packages import. ``profiles`` maps a runtime to a
    device profile checked at export (e.g. ``{"tflm": "cortex-m7"}``). ``calib``: int8
    calibration waves (default: the exporters' held-out espeak-ng set, never the test data).
    ``threads``: set torch's thread count (the CLI uses 1, as on a device; None: leave it).
    ``dnsmos``: also score DNSMOS OVRL per row (``Row.dnsmos_ovrl``; ~0.5 s of CPU per
    second of audio per row).
    """
    from tqdm import tqdm

    from qsa.audio.io import write_audio
    from qsa.metrics.batch import batch_metrics, summarize

    t_start = time.perf_counter()
    say = log or (lambda s: None)
    runtimes = list(runtimes) if runtimes else available_runtimes()
    runtimes = list(dict.fromkeys(runtimes))
    precisions = list(dict.fromkeys(precisions))
    check_choices(runtimes, precisions)
    profiles = dict(profiles or {})
    pairs = resolve_data(data, split=split, limit=limit)
    if dnsmos:
        from qsa.metrics.dnsmos import model_dir

        model_dir()  # a missing speechmos fails now, not after every export
    data_desc = str(data) if isinstance(data, str | os.PathLike) else (
        getattr(data, "description", None) or f"{len(pairs)} pairs")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    loaded = load_models(models, allow_untrained)
    out = Path(out_dir)
    ensure_dir(out, "--out folder")

    noisy = [p.load()[0] for p in pairs]
    audio_s = sum(len(x) for x in noisy) / SR
    calib_digest = "default"
    if calib is not None:
        h = hashlib.sha256()
        for w in calib:
            h.update(np.ascontiguousarray(w, np.float32).tobytes())
        calib_digest = h.hexdigest()

    rows: list[Row] = [Row("(input)", "noisy", "-", status="input")]
    jobs: list[tuple[Row, list[tuple]]] = [(rows[0], list(pairs))]
    model_info: dict[str, dict] = {}
    combos = [("torch", "fp32")] + [(r, p) for r in runtimes for p in precisions
                                    if (r, p) != ("torch", "fp32")
                                    and p in RUNTIME_PRECISIONS.get(r, PRECISIONS)]
    for label, (model, spec) in loaded.items():
        digest = model_digest(model)
        delay = int(getattr(model, "delay_samples", 0) or 0)
        model_info[label] = {
            "source": spec, "sha256": digest, "delay_samples": delay,
            "params": int(sum(p.numel() for p in model.parameters())),
        }
        for runtime, precision in combos:
            row = Row(label, runtime, precision)
            rows.append(row)
            folder = out / "artifacts" / label / f"{runtime}-{precision}"
            try:
                artifact, report, cached, secs = build_artifact(
                    model, label, runtime, precision, folder, profile=profiles.get(runtime),
                    calib=calib, calib_digest=calib_digest, digest=digest, rebuild=rebuild)
                row.artifact = str(artifact.relative_to(out))
                row.cached, row.export_s = cached, round(secs, 2)
                row.bytes = int(report.get("bytes") or artifact.stat().st_size)
                say(f"{row.key}: {'cached' if cached else f'exported in {secs:.0f} s'} "
                    f"({row.bytes:,} bytes)")
                rt = open_runtime(runtime, precision, artifact, report)
                times: list[float] = []
                items = []
                enh_dir = out / "enhanced" / label / f"{runtime}-{precision}"
                for pair, wave in tqdm(list(zip(pairs, noisy, strict=True)), desc=row.key,
                                       unit="utt", disable=not progress, leave=False):
                    y = stream_aligned(rt, wave, delay, times)
                    path = enh_dir / f"{_safe_name(pair.name)}.wav"
                    write_audio(path, y, SR, force=True, subtype="FLOAT")
                    items.append((pair.name, pair.clean, path))
                ms = np.asarray(times) * 1e3
                row.hop_ms_median = round(float(np.median(ms)), 4)
                row.hop_ms_p99 = round(float(np.percentile(ms, 99)), 4)
                row.rtf = round(float(ms.sum() / 1e3 / audio_s), 4)
                row.status = "ok"
                jobs.append((row, items))
            except KeyboardInterrupt:
                raise
            except Exception as e:  # one combination failing never stops the others
                row.cached = isinstance(e, CachedExportFailure)
                msg = " ".join(str(e).split()) or type(e).__name__
                if not isinstance(e, QsaError):
                    msg = f"{type(e).__name__}: {msg}"
                row.status, row.error = "failed", msg
                say(f"{row.key}: FAILED: {msg}")

    # one process pool for every row's items; results come back in order
    flat = [it for _, items in jobs for it in items]
    say(f"scoring {len(flat)} outputs ({len(pairs)} utterances x {len(jobs)} rows)")
    scored = batch_metrics(flat, workers=workers, sr=SR, metrics=SCORES, progress=progress)
    k = 0
    for row, items in jobs:
        part = scored.items[k : k + len(items)]
        k += len(items)
        summary = summarize(part, SCORES)
        for m in SCORES:
            setattr(row, m, summary.means[m])
        row.counts = summary.counts
        row.items = part
    if dnsmos:
        _score_dnsmos(jobs, noisy, max(1, workers), progress)
    for label in loaded:
        ref = next(r for r in rows if (r.model, r.runtime, r.precision) == (label, "torch",
                                                                              "fp32"))
        for r in rows:
            if r.model == label and r.status == "ok" and ref.status == "ok":
                r.delta_pesq_wb = r.pesq_wb - ref.pesq_wb
    results = CompareResults(rows, data_desc, split, [p.name for p in pairs], model_info,
                             runtimes, precisions, out, dnsmos=dnsmos)
    results.seconds = time.perf_counter() - t_start
    write_results(results)
    return results


def _score_dnsmos(jobs, noisy: list[np.ndarray], threads: int, progress: bool) -> None:
    """DNSMOS OVRL of every row's outputs (the noisy row: the inputs): the item's
    ``dnsmos_ovrl`` (NaN with the reason in its ``errors`` when unscorable), the row's mean
    over the scored items and its count."""
    from tqdm import tqdm

    from qsa.audio.io import read_audio
    from qsa.metrics.dnsmos import dnsmos_item

    for row, items in tqdm(jobs, desc="DNSMOS", unit="row", disable=not progress,
                           leave=False):
        vals = []
        for k, it in enumerate(row.items):
            y = noisy[k] if row.status == "input" else read_audio(items[k][2], SR)[0]
            s = dnsmos_item(it["name"], y, SR, threads, f"{row.key} {it['name']}")
            it["dnsmos_ovrl"] = s["dnsmos_ovrl"]
            if s.get("errors"):
                it.setdefault("errors", {})["dnsmos_ovrl"] = s["errors"]["dnsmos_ovrl"]
            elif math.isfinite(s["dnsmos_ovrl"]):
                vals.append(s["dnsmos_ovrl"])
        row.dnsmos_ovrl = float(np.mean(vals)) if vals else math.nan
        row.counts["dnsmos_ovrl"] = len(vals)


# --------------------------------------------------------------------------- outputs


CELL_FORMATS = (("pesq_wb", ".3f"), ("pesq_nb", ".3f"), ("stoi", ".3f"), ("si_sdr", ".2f"),
                ("delta_pesq_wb", "+.3f"), ("bytes", ",d"))


def metric_cells(r: Row, dnsmos: bool = False) -> list[str]:
    """PESQ-WB, PESQ-NB, STOI, SI-SDR, (DNSMOS OVRL with ``dnsmos``), ΔPESQ-WB and bytes of
    ``r`` as table cells."""
    formats = CELL_FORMATS[:4] + ((("dnsmos_ovrl", ".3f"),) if dnsmos else ()) + CELL_FORMATS[4:]
    return [format_cell(getattr(r, k), f) for k, f in formats]


def format_cell(v, fmt: str) -> str:
    """A table cell: "-" for None/NaN, floats rounded so that no "-0.000" appears."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float) and fmt.endswith("f"):  # no "-0.000"
        v = round(v, int(fmt.rstrip("f").split(".")[-1])) + 0.0
    return format(v, fmt)


def results_markdown(res: CompareResults) -> str:
    dn = "| DNSMOS OVRL " if res.dnsmos else ""
    head = ("| model | runtime | precision | PESQ-WB | PESQ-NB | STOI | SI-SDR (dB) "
            f"{dn}| ΔPESQ-WB vs torch fp32 | bytes | latency/hop median (ms) "
            "| latency/hop p99 (ms) | RTF | status |")
    lines = [
        f"# qsa compare: {', '.join(res.models)} on {res.data}",
        "",
        f"{len(res.names)} utterances ({res.split} split), streamed hop by hop in each runtime "
        "(one thread), output aligned by the model's streaming delay; ΔPESQ-WB against the same "
        "model streamed by torch fp32. Latency is the host CPU's, per step call.",
        "",
        head,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        + ("---:|" if res.dnsmos else "") + "---|",
    ]
    for r in res.rows:
        if r.status == "failed":
            status = "failed: " + (r.error or "").replace("|", "\\|")
        elif r.status == "ok":
            status = "ok (cached)" if r.cached else "ok"
        else:
            status = r.status
        cells = [r.model, r.runtime, r.precision, *metric_cells(r, res.dnsmos),
                 *(format_cell(v, ".3f") for v in (r.hop_ms_median, r.hop_ms_p99, r.rtf)),
                 status]
        lines.append("| " + " | ".join(cells) + " |")
    short = [r for r in res.rows if r.status != "failed"
             and any(r.counts.get(m, 0) < len(res.names) for m in SCORES)]
    if short:
        lines += ["", "Items a metric could not score (left out of that mean):"]
        for r in short:
            miss = {m: len(res.names) - r.counts.get(m, 0) for m in SCORES
                    if r.counts.get(m, 0) < len(res.names)}
            lines.append(f"- {r.key}: {miss}")
    lines += ["", f"![PESQ-WB per runtime and precision]({PLOT_FILE})", ""]
    return "\n".join(lines)


def plot_results(res: CompareResults, path: Path) -> None:
    """PESQ-WB bars per runtime (one bar per precision), one panel per model (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from qsa.fileio import atomic_path

    labels = list(res.models)
    runtimes = list(dict.fromkeys(["torch", *res.runtimes]))
    precisions = list(dict.fromkeys(["fp32", *res.precisions]))
    noisy = res.rows[0].pesq_wb
    fig, axes = plt.subplots(1, len(labels), figsize=(1.2 + 1.6 * len(runtimes), 4.2),
                             squeeze=False, sharey=True)
    width = 0.8 / len(precisions)
    colours = {"fp32": "#3b75af", "int8": "#ef8636"}
    ok_vals = [r.pesq_wb for r in res.rows if math.isfinite(r.pesq_wb)]
    top = max(ok_vals + [1.0]) + 0.4
    for ax, label in zip(axes[0], labels, strict=True):
        for j, prec in enumerate(precisions):
            for i, rt in enumerate(runtimes):
                x = i + (j - (len(precisions) - 1) / 2) * width
                try:
                    r = res.row(label, rt, prec)
                except KeyError:
                    continue
                if r.status == "ok" and math.isfinite(r.pesq_wb):
                    ax.bar(x, r.pesq_wb, width * 0.9, color=colours.get(prec, "grey"),
                           label=prec if i == 0 else None)
                    ax.text(x, r.pesq_wb + 0.02, f"{r.pesq_wb:.2f}", ha="center",
                            va="bottom", fontsize=7)
                else:
                    ax.text(x, 1.05, "failed" if r.status == "failed" else "n/a",
                            ha="center", va="bottom", fontsize=7, rotation=90, color="red")
        if math.isfinite(noisy):
            ax.axhline(noisy, color="k", ls="--", lw=1, label=f"noisy {noisy:.2f}")
        ax.set_xticks(range(len(runtimes)), runtimes)
        ax.set_ylim(1.0, top)
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("PESQ-WB (streamed)")
    axes[0][0].legend(fontsize=8, loc="upper right")
    fig.suptitle(f"PESQ-WB on {len(res.names)} utterances ({res.data})", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)


def write_results(res: CompareResults) -> None:
    from qsa.fileio import atomic_write_text

    out = Path(res.out_dir)

    def clean(v):  # NaN/inf are not JSON: null
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        if isinstance(v, np.generic):
            return clean(v.item())
        if isinstance(v, Path):
            return str(v)
        return v

    atomic_write_text(out / "results.json", json.dumps(clean(res.to_dict()), indent=1) + "\n")
    atomic_write_text(out / "results.md", res.markdown())
    plot_results(res, out / PLOT_FILE)
