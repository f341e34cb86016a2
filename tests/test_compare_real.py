"""`qsa compare` on a real-voice corpus (`--data real:DIR`) with the DNSMOS OVRL column."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from syspkgs import require

from qsa.data import real


@pytest.mark.slow
def test_compare_reads_real_corpus_and_scores_dnsmos(tmp_path):
    import qsa
    from qsa.apps.compare import compare
    from qsa.audio.io import write_audio

    require(real.missing_packages(), "the real-voice corpus's Debian packages")

    corpus = tmp_path / "real"  # two test items, written as `qsa data real` writes them
    for i in (0, 1):
        record, clean, noisy = real.build_item((5, "test", i, 0.0))
        write_audio(corpus / record["clean"], clean, real.SR)
        write_audio(corpus / record["noisy"], noisy, real.SR)
    res = compare(["qcgan-35k"], f"real:{corpus}", ["torch"], ["fp32"], tmp_path / "out",
                  limit=2, workers=0, threads=1, progress=False, log=None, dnsmos=True)
    assert len(res.names) == 2 and all(n.split("_")[0] in ("june", "carlo") for n in res.names)
    noisy, model = res.rows
    from qsa.audio.io import read_audio
    from qsa.metrics.dnsmos import dnsmos

    direct = np.mean([dnsmos(read_audio(corpus / "test" / "noisy" / f"{n}.wav")[0])["ovrl"]
                      for n in res.names])
    assert abs(noisy.dnsmos_ovrl - direct) < 1e-3, (noisy.dnsmos_ovrl, direct)
    # the model row scores the model's output: the offline enhancement of the same items
    # (streaming torch fp32 equals it to ~1e-5), not the input
    enhanced = np.mean([dnsmos(qsa.enhance(read_audio(corpus / "test" / "noisy" /
                                                      f"{n}.wav")[0], real.SR))["ovrl"]
                        for n in res.names])
    assert abs(model.dnsmos_ovrl - enhanced) < 0.02, (model.dnsmos_ovrl, enhanced)
    assert abs(model.dnsmos_ovrl - noisy.dnsmos_ovrl) > 1e-3, (model, noisy)
    for r in (noisy, model):
        assert 1.0 <= r.dnsmos_ovrl <= 5.0, r
        assert r.counts["dnsmos_ovrl"] == 2
        assert all(math.isfinite(it["dnsmos_ovrl"]) for it in r.items)
        assert math.isfinite(r.pesq_wb) and math.isfinite(r.stoi)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "dnsmos_ovrl" in saved["metrics"]
    assert saved["rows"][1]["dnsmos_ovrl"] == pytest.approx(model.dnsmos_ovrl)
    md = (tmp_path / "out" / "results.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| model"))
    row = next(line for line in md.splitlines() if line.startswith("| qcgan-35k | torch"))
    assert "DNSMOS OVRL" in head
    assert head.count("|") == row.count("|")  # the column is in every row
    assert f"{model.dnsmos_ovrl:.3f}" in row
