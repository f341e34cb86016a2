"""llama-bench-style profiling of the byte LMs on torch eager, ExecuTorch or LiteRT.

Rows: ``ppP`` (one prefill call of P prompt tokens) and ``tgN`` (N single-token decode steps
after a prefill), tokens/s mean +- std over ``reps`` repetitions after warm-up. Also: load
time, time to first token (prefill + first argmax), peak RSS of the process, artifact bytes,
params, threads, backend, dtype, a per-operator breakdown of decode (the torch profiler on the
torch runtime; ExecuTorch's own ETDump read by its Inspector, XNNPACK's per-operator events
included; none for LiteRT, whose Python interpreter has no op profiler), and a ``stats``
block with the field names of the ExecuTorch LLM runner's Stats (times in ms).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ..errors import QsaError
from ..fileio import atomic_write_text
from ..models.lm import MIXERS, CausalLM, lm_config, upgrade_config_dict
from .export import Decode, Prefill, Runner, calibration_prompts, export_lm


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class TorchRunner:
    """Eager PyTorch with the same prefill / decode methods as an exported artifact."""

    backend = "torch-eager"

    def __init__(self, model: CausalLM, threads: int):
        t0 = time.perf_counter()
        torch.set_num_threads(threads)
        self.model = model.eval()
        self._pre, self._dec = Prefill(self.model), Decode(self.model)
        self.load_seconds = time.perf_counter() - t0

    def prefill(self, *args):
        with torch.no_grad():
            return self._pre(*args)

    def decode(self, *args):
        with torch.no_grad():
            return self._dec(*args)


def _time_prefill(runner, prompt, cache):
    t0 = time.perf_counter()
    out = runner.prefill(prompt, *cache)
    int(out[0][:, -1].argmax())
    return time.perf_counter() - t0, tuple(out[1:])


def _time_decode(runner, cache, start: int, n: int):
    tok = torch.zeros(1, 1, dtype=torch.int32)
    t0 = time.perf_counter()
    for i in range(n):
        out = runner.decode(tok, torch.tensor([start + i], dtype=torch.int32), *cache)
        cache = tuple(out[1:])
        tok = out[0][:, -1:].argmax(-1).to(torch.int32)
    return time.perf_counter() - t0


def _mean_std(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def profile_runner(runner, model: CausalLM, pp: int, tg: int, reps: int, warmup: int = 2):
    cfg = model.config
    if pp + tg > cfg.max_seq_len:
        raise QsaError(f"pp {pp} + tg {tg} exceeds the cache of {cfg.max_seq_len} slots")
    prompt = calibration_prompts(1, pp, seed=7)[0]
    empty = model.init_cache(1, cfg.max_seq_len)
    pp_t, tg_t = [], []
    for r in range(warmup + reps):
        t_pre, cache = _time_prefill(runner, prompt, empty)
        t_dec = _time_decode(runner, cache, pp, tg)
        if r >= warmup:
            pp_t.append(t_pre)
            tg_t.append(t_dec)
    pp_tps = [pp / t for t in pp_t]
    tg_tps = [tg / t for t in tg_t]
    return pp_t, tg_t, pp_tps, tg_tps


def _torch_op_breakdown(runner: TorchRunner, model: CausalLM, top: int = 12) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    cache = model.init_cache(1, model.config.max_seq_len)
    prompt = calibration_prompts(1, 8, seed=7)[0]
    _, cache = _time_prefill(runner, prompt, cache)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _time_decode(runner, cache, 8, 16)
    rows = []
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]:
        rows.append({"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3})
    return rows


_ETDUMP_WRAPPERS = {"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "Method::init",
                    "Program::load_method"}


def _executorch_op_breakdown(path: Path, model: CausalLM, threads: int,
                             steps: int = 16) -> list[dict]:
    """Per-operator time of ``steps`` decode steps from the runtime's own ETDump, read with
    the ExecuTorch Inspector: XNNPACK's per-operator events inside the delegate (e.g. "Fully
    Connected (NC, F32) GEMM") and the portable kernels outside it ("native_call_..."),
    grouped by operator kind. A second program instance with ETDump enabled, so the timed
    rows above are not instrumented. [] when the runtime was built without ETDump."""
    import re

    import executorch.extension.pybindings.portable_lib as pl

    try:
        from executorch.devtools import Inspector
    except ImportError:
        return []
    if threads:
        pl._unsafe_reset_threadpool(threads)
    m = pl._load_for_executorch(str(path), enable_etdump=True)
    if not m.has_etdump():
        return []
    # decode steps only (a decode step's cost does not depend on the cache's values): every
    # event in the dump is then a decode event, one time per step in perf_data.raw
    cache = model.init_cache(1, model.config.max_seq_len)
    tok = torch.zeros(1, 1, dtype=torch.int32)
    for i in range(steps):
        out = m.run_method("decode", (tok, torch.tensor([i], dtype=torch.int32), *cache))
        cache, tok = tuple(out[1:]), out[0][:, -1:].argmax(-1).to(torch.int32)
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "decode.etdp"
        m.write_etdump_result_to_file(str(dump))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no ETRecord": names come from the ETDump
            inspector = Inspector(etdump_path=str(dump))
    total: dict[str, float] = {}
    calls: dict[str, int] = {}
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for e in block.events:
            if e.perf_data is None or e.name in _ETDUMP_WRAPPERS:
                continue
            kind = re.sub(r"\s*#\d+$", "", e.name)
            raw = list(e.perf_data.raw)  # ms, one per decode step
            total[kind] = total.get(kind, 0.0) + sum(raw)
            calls[kind] = calls.get(kind, 0) + len(raw)
    return [{"op": k, "calls": calls[k], "self_ms": v}  # every kind; markdown shows 12
            for k, v in sorted(total.items(), key=lambda kv: -kv[1])]


def resolve(artifact: str, runtime: str, size: str, overrides: dict, work: Path):
    """(runner, model, artifact path or None, dtype) for an artifact, model file or mixer."""
    from .train import load_model

    p = Path(artifact)
    if runtime == "torch":
        if artifact in MIXERS:
            torch.manual_seed(0)
            return None, CausalLM(lm_config(artifact, size, **overrides)), None, "fp32"
        model, _ = load_model(p)
        return None, model, p if p.is_file() else p / "model.safetensors", "fp32"
    suffix = ".pte" if runtime == "executorch" else ".tflite"
    if artifact in MIXERS or (p.exists() and (p.suffix == ".safetensors" or (
            p.is_dir() and (p / "model.safetensors").exists()))):
        if artifact in MIXERS:
            torch.manual_seed(0)
            model = CausalLM(lm_config(artifact, size, **overrides))
        else:
            model, _ = load_model(p)
        meta = export_lm(model, runtime, work, "fp32", cache_len=model.config.max_seq_len)
        return None, model, work / meta["artifact"], "fp32"
    if p.is_dir():
        found = sorted(p.glob(f"*{suffix}"))
        if not found:
            raise QsaError(f"no {suffix} artifact in {p}; run `qsa lm export` first")
        p = found[0]
    if p.suffix != suffix:
        raise QsaError(f"{p} is not a {suffix} file for --runtime {runtime}")
    meta_path = p.with_suffix(".json")
    if not meta_path.exists():
        raise QsaError(f"{meta_path} missing: profile artifacts written by `qsa lm export`")
    meta = json.loads(meta_path.read_text())
    if meta.get("verified") is False:
        raise QsaError(f"{p} failed its verification at export ({meta.get('error', '?')}); "
                       "its numbers would not describe a working model: re-export it")
    from ..config import config_from_dict

    # shapes only (the weights are in p); version-1 configs load as the lagged Kuramoto form
    model = CausalLM(config_from_dict(upgrade_config_dict(meta["config"])))
    return None, model, p, meta["precision"]


def profile(artifact: str, runtime: str = "torch", size: str = "1m", pp: int = 64,
            tg: int = 128, reps: int = 5, threads: int = 1, overrides: dict | None = None,
            out: str | os.PathLike | None = None) -> dict:
    if reps < 1:
        raise QsaError(f"reps={reps}; need at least 1 (5 or more for a mean +- std)")
    with tempfile.TemporaryDirectory() as tmp:
        t_res = time.perf_counter()
        _, model, path, dtype = resolve(artifact, runtime, size, overrides or {}, Path(tmp))
        t_res = time.perf_counter() - t_res  # torch: building / reading the model
        if path is not None and path.suffix in (".pte", ".tflite"):
            plen = json.loads(path.with_suffix(".json").read_text())["prefill_len"]
            if plen != pp:
                raise QsaError(f"{path.name} was exported with a static prefill of {plen} "
                               f"tokens; profile it with --pp {plen} or re-export")
        t_load0 = time.perf_counter()
        runner = TorchRunner(model, threads) if runtime == "torch" else Runner(path, threads)
        load_s = runner.load_seconds + (t_res if runtime == "torch" else 0.0)
        t_inf0 = time.perf_counter()
        pp_t, tg_t, pp_tps, tg_tps = profile_runner(runner, model, pp, tg, reps)
        if runtime == "torch":
            ops, ops_source = _torch_op_breakdown(runner, model), "torch profiler"
        elif runtime == "executorch":
            ops, ops_source = _executorch_op_breakdown(path, model, threads), "ETDump"
        else:
            ops, ops_source = [], None  # the LiteRT Python interpreter has no op profiler
        nbytes = path.stat().st_size if path else model.num_params() * 4
    name = f"lm-{model.config.mixer}"
    base = {"model": name, "params": model.num_params(), "bytes": nbytes, "dtype": dtype,
            "backend": runner.backend, "threads": threads}
    rows = []
    for test, tps in ((f"pp{pp}", pp_tps), (f"tg{tg}", tg_tps)):
        m, s = _mean_std(tps)
        rows.append({**base, "test": test, "tokens_per_s": m, "tokens_per_s_std": s,
                     "reps": reps, "samples": tps})
    ttft_ms = statistics.mean(pp_t) * 1e3
    first = t_inf0 * 1e3
    stats = {  # ExecuTorch LLM runner Stats field names, one representative pp + tg run
        "SCALING_FACTOR_UNITS_PER_SECOND": 1000,
        "model_load_start_ms": t_load0 * 1e3, "model_load_end_ms": (t_load0 + load_s) * 1e3,
        "inference_start_ms": first, "prompt_eval_end_ms": first + ttft_ms,
        "first_token_ms": first + ttft_ms,
        "inference_end_ms": first + ttft_ms + statistics.mean(tg_t) * 1e3,
        "aggregate_sampling_time_ms": 0.0, "num_prompt_tokens": pp, "num_generated_tokens": tg,
    }
    result = {**base, "runtime": runtime, "artifact": str(path) if path else None,
              "load_ms": load_s * 1e3, "ttft_ms": ttft_ms, "peak_rss_mb": _peak_rss_mb(),
              "rows": rows, "stats": stats, "op_breakdown": ops,
              "op_breakdown_source": ops_source}
    if out:
        out = Path(out)
        atomic_write_text(out / "profile.json", json.dumps(result, indent=1) + "\n")
        atomic_write_text(out / "profile.md", markdown([result]))
    return result


def markdown(results: list[dict]) -> str:
    lines = ["| model | params | bytes | backend | dtype | threads | test | t/s | load ms | "
             "TTFT ms | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["rows"]:
            lines.append(
                f"| {r['model']} | {r['params']:,} | {r['bytes']:,} | {r['backend']} | "
                f"{r['dtype']} | {r['threads']} | {row['test']} | {row['tokens_per_s']:.1f} +- "
                f"{row['tokens_per_s_std']:.1f} | {r['load_ms']:.1f} | {r['ttft_ms']:.2f} | "
                f"{r['peak_rss_mb']:.0f} |")
    if results and results[0].get("op_breakdown"):
        src = results[0].get("op_breakdown_source") or "torch profiler"
        lines += ["", f"| op ({src}, 16 decode steps) | calls | self ms |",
                  "|---|---|---|"]
        for o in results[0]["op_breakdown"][:12]:
            lines.append(f"| {o['op']} | {o['calls']} | {o['self_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def profile_cli(args) -> int:
    r = profile(args.artifact, args.runtime, args.size, args.pp, args.tg, args.reps,
                args.threads, dict(args.overrides), args.out)
    print(markdown([r]), end="")
    return 0
