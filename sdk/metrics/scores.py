"""Single-pair speech metrics that never raise on bad audio: (value, reason) or NaN.

``compute_metrics(ref, deg, sr)`` returns one dict of every metric; a metric that cannot be
computed for this pair (silent reference, too short, PESQ's "no utterances detected", ...)
is NaN, with the reason in ``dict["errors"][name]``. Metrics: PESQ wide-band and
narrow-band (ITU-T P.862.2 / P.862 via the ``pesq`` package), STOI and extended STOI
(``pystoi``), SI-SDR, and the composite CSIG/CBAK/COVL with their LLR, WSS and segSNR terms.
"""

from __future__ import annotations

import warnings

import numpy as np

METRICS = ("pesq_wb", "pesq_nb", "stoi", "estoi", "si_sdr", "csig", "cbak", "covl", "llr",
           "wss", "segsnr")
NAN = float("nan")


def si_sdr(ref: np.ndarray, est: np.ndarray) -> float:
    """Scale-invariant SDR in dB (Le Roux et al. 2019), both signals made zero-mean."""
    ref = np.asarray(ref, dtype=np.float64)
    est = np.asarray(est, dtype=np.float64)
    ref, est = ref - ref.mean(), est - est.mean()
    energy = float(ref @ ref)
    if energy == 0.0:
        raise ValueError("the reference is silent (zero energy)")
    target = (float(est @ ref) / energy) * ref
    noise = est - target
    if not np.any(est):
        raise ValueError("the estimate is silent (all zeros): SI-SDR is -inf")
    return float(10 * np.log10(float(target @ target) / max(float(noise @ noise), 1e-300)))


def pesq_score(ref: np.ndarray, deg: np.ndarray, sr: int = 16000, mode: str = "wb") -> float:
    """PESQ MOS-LQO; raises ValueError with pesq's reason when it cannot score the pair."""
    from pesq import pesq

    from qsa.audio.resample import resample

    if mode == "wb" and sr != 16000 or sr not in (8000, 16000):
        ref, deg = resample(ref, sr, 16000), resample(deg, sr, 16000)
        sr = 16000
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # pesq divides silent input by 0
            return float(pesq(sr, np.asarray(ref, np.float64), np.asarray(deg, np.float64),
                              mode))
    except Exception as e:  # pesq.PesqError subclasses, and cypesq's own errors
        raise ValueError(f"{type(e).__name__}: {e}") from e


def stoi_score(ref: np.ndarray, deg: np.ndarray, sr: int = 16000, extended: bool = False,
               ) -> float:
    """STOI (or ESTOI); raises ValueError when pystoi finds too little speech."""
    from pystoi import stoi

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = float(stoi(np.asarray(ref, np.float64), np.asarray(deg, np.float64), sr,
                               extended=extended))
        except Exception as e:  # pystoi fails with index errors on very short input
            raise ValueError(f"STOI failed ({type(e).__name__}: {e}); is the signal "
                             "shorter than 0.4 s?") from e
    for w in caught:
        if "Not enough STFT frames" in str(w.message):
            raise ValueError("not enough speech frames for STOI (silent or < 0.4 s of speech)")
    return value


def compute_metrics(ref: np.ndarray, deg: np.ndarray, sr: int = 16000,
                    metrics: tuple[str, ...] = METRICS) -> dict:
    """Every metric in ``metrics`` for one pair; NaN + reason in ``errors`` where it failed.

    Signals of different length are cut to the shorter one (enhancers may pad).
    """
    from .composite import composite_from_terms, llr, seg_snr, wss

    unknown = set(metrics) - set(METRICS)
    if unknown:
        raise ValueError(f"unknown metric(s) {sorted(unknown)}; expected some of {METRICS}")
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    deg = np.asarray(deg, dtype=np.float64).reshape(-1)
    n = min(len(ref), len(deg))
    ref, deg = ref[:n], deg[:n]
    out: dict = {m: NAN for m in metrics}
    errors: dict[str, str] = {}

    def attempt(name: str, fn):
        try:
            return fn()
        except Exception as e:  # a failing metric is NaN + reason, never a crash
            errors[name] = str(e) or type(e).__name__
            return NAN

    reason = None
    if n == 0:
        reason = "empty signal"
    elif not (np.isfinite(ref).all() and np.isfinite(deg).all()):
        reason = "NaN/Inf samples"
    elif not np.any(ref):
        reason = "the reference is silent (all zeros)"
    if reason:
        return {**out, "errors": {m: reason for m in metrics}}
    deg_silent = not np.any(deg)
    if "si_sdr" in metrics:
        out["si_sdr"] = attempt("si_sdr", lambda: si_sdr(ref, deg))
    if "stoi" in metrics:
        out["stoi"] = attempt("stoi", lambda: stoi_score(ref, deg, sr))
    if "estoi" in metrics:
        out["estoi"] = attempt("estoi", lambda: stoi_score(ref, deg, sr, extended=True))
    silent_msg = "the degraded signal is silent (all zeros); PESQ is undefined"
    for mode in ("nb", "wb"):
        name = f"pesq_{mode}"
        if name in metrics or (mode == "wb" and {"csig", "cbak", "covl"} & set(metrics)):
            if deg_silent:
                errors[name] = silent_msg
            else:
                out[name] = attempt(name, lambda m=mode: pesq_score(ref, deg, sr, m))
    terms = {"llr": llr, "wss": wss, "segsnr": seg_snr}
    for name, fn in terms.items():
        if name in metrics or {"csig", "cbak", "covl"} & set(metrics):
            out[name] = attempt(name, lambda f=fn: f(ref, deg, sr))
    wanted = [m for m in ("csig", "cbak", "covl") if m in metrics]
    if wanted:
        missing = [t for t in ("pesq_wb", *terms) if not np.isfinite(out[t])]
        if missing:
            why = "; ".join(f"{t}: {errors.get(t, 'not finite')}" for t in missing)
            for m in wanted:
                errors[m] = f"needs {', '.join(missing)} ({why})"
        else:
            scores = composite_from_terms(out["llr"], out["wss"], out["segsnr"], out["pesq_wb"])
            out.update({m: scores[m] for m in wanted})
    for extra in ("pesq_wb", *terms):  # computed only for the composite
        if extra not in metrics:
            out.pop(extra, None)
            errors.pop(extra, None)
    out["errors"] = errors
    return out
