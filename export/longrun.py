"""Long-run check of a streaming runtime: flat memory and state carried exactly.

``long_run(make_runtime, seconds)`` streams ``seconds`` of deterministic noisy speech-like
audio (generated chunk by chunk, never held whole) hop by hop through one runtime, keeping a
sha256 per chunk of the output instead of the output itself, and sampling the process RSS
after every chunk. Then a *fresh* runtime processes the same audio chunk by chunk, the state
handed across chunk boundaries explicitly (as an app does when audio arrives in buffers);
both passes must give the same bytes (a runtime with hidden state across invokes, or a state
output that is not the whole state, fails this). Used by ``bench/long_run.py`` (1 hour) and
the test suite (a minute).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from .runtimes import Runtime

SR = 16000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def audio_chunk(k: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Chunk ``k`` of the long test signal: synthetic speech + noise at an SNR cycling over
    0..20 dB, every third chunk with 2 s of digital silence in it (deterministic per chunk)."""
    from .calib import synthetic_speech

    s = synthetic_speech(seconds, seed=seed * 100_003 + k)
    rng = np.random.default_rng(seed * 7919 + k)
    n = rng.standard_normal(len(s)).astype(np.float32)
    snr = (0, 5, 10, 20)[k % 4]
    n *= np.sqrt(np.mean(s**2) / 10 ** (snr / 10) / np.mean(n**2))
    x = np.clip(0.5 * (s + n), -1, 1).astype(np.float32)
    if k % 3 == 2:  # silence: the magnitude floor of every bin is exercised
        mid = len(x) // 2
        x[max(0, mid - SR) : mid + SR] = 0.0
    return x


def _stream_chunk(rt: Runtime, x: np.ndarray, state: list[np.ndarray]):
    hop = rt.hop
    h = hashlib.sha256()
    for t in range(len(x) // hop):
        y, state = rt.step(x[t * hop : (t + 1) * hop], state)
        h.update(np.ascontiguousarray(y, np.float32).tobytes())
    return h.hexdigest(), state


def long_run(
    make_runtime: Callable[[], Runtime],
    seconds: float,
    chunk_s: float = 10.0,
    warmup_chunks: int = 1,
    progress: bool = False,
) -> dict:
    """Stream ``seconds`` through ``make_runtime()``; see the module docstring. Returns
    RSS samples, the growth after ``warmup_chunks`` and whether both passes agree."""
    from tqdm import tqdm

    n_chunks = max(1, int(round(seconds / chunk_s)))
    rt = make_runtime()
    n = int(chunk_s * SR) // rt.hop * rt.hop  # whole hops per chunk: chunks join seamlessly
    state = rt.init_state()
    digests, rss = [], []
    for k in tqdm(range(n_chunks), desc="stream", disable=not progress):
        d, state = _stream_chunk(rt, audio_chunk(k, n / SR), state)
        digests.append(d)
        rss.append(_rss_bytes())
    fresh = make_runtime()
    carried = fresh.init_state()
    mismatch = []
    for k in tqdm(range(n_chunks), desc="chunked", disable=not progress):
        d, carried = _stream_chunk(fresh, audio_chunk(k, n / SR), [s.copy() for s in carried])
        if d != digests[k]:
            mismatch.append(k)
    base = rss[min(warmup_chunks, len(rss) - 1)]
    return {
        "seconds": n_chunks * n / SR,
        "hops": n_chunks * (n // rt.hop),
        "chunks": n_chunks,
        "rss_bytes": rss,
        "rss_growth_bytes": int(max(rss) - base),
        "identical": not mismatch,
        "mismatched_chunks": mismatch,
    }
