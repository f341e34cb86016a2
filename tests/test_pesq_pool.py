"""qsa.train.pesq_pool: batch PESQ in worker processes survives a worker that dies."""

from __future__ import annotations

import time

import numpy as np
import pytest

from qsa.data.synth import espeak
from qsa.train.pesq_pool import PesqPool, _pesq_one


@pytest.fixture(scope="module")
def pair() -> tuple[np.ndarray, np.ndarray]:
    s = espeak("The quick brown fox jumped over the lazy dog near the river bank.",
               "en-gb", "m3", 160, 50)
    pad = np.zeros(3200, np.float32)
    clean = np.concatenate([pad, 0.3 * s / np.max(np.abs(s)), pad]).astype(np.float64)
    # white noise at a level that leaves PESQ-WB mid-scale (~2.4), not at its 1.04 floor,
    # so a masked or mis-paired score cannot pass for the real one
    noisy = clean + 7e-4 * np.random.default_rng(0).standard_normal(len(clean))
    return clean, noisy


def _kill_workers(pool: PesqPool) -> None:
    for p in list(pool._ex._processes.values()):
        p.kill()
        p.join()


def test_a_dead_worker_masks_its_batch_and_the_pool_starts_again(pair):
    clean, noisy = pair
    from pesq import pesq

    want = _pesq_one((clean, noisy, 16000, "wb"))
    # the worker's function is the real pesq package's score (assert_allclose below would
    # also pass NaN == NaN), and mid-scale: well above the floor, below clean vs clean
    assert want == pesq(16000, clean, noisy, "wb")
    assert 2.0 < want < pesq(16000, clean, clean, "wb") - 1.0
    with PesqPool(workers=1) as pool:
        np.testing.assert_allclose(pool([clean], [noisy]), [want])
        # a batch in flight when its worker dies: NaN (masked), not an exception
        long_ref, long_deg = np.tile(clean, 8), np.tile(noisy, 8)  # ~0.5 s of PESQ work
        fut = pool.submit([long_ref, long_ref], [long_deg, long_deg])
        _kill_workers(pool)
        assert np.isnan(fut.result()).all()
        deadline = time.monotonic() + 30
        while not pool._ex._broken and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool._ex._broken  # the executor saw its worker die
        # the next batch gets a new pool, says so, and scores normally
        with pytest.warns(RuntimeWarning, match="PESQ worker died"):
            got = pool([clean, clean], [noisy, clean])
        assert pool.restarts == 1
        np.testing.assert_allclose(got[0], want)
        assert got[1] > want  # the clean signal against itself scores higher
