"""qcgan-35k as generated C99 (`qsa export --target c`, qsa.export.c_export), run for real.

One full export (the TFLite-Micro int8 artifact, then the C folder generated from it, built
with the host cc and verified), then:

* the network's int8 outputs and state equal TFLite-Micro's on every step of a real utterance,
  and a debug build equals it on every intermediate tensor (each op's kernel checked);
* the PCM API (C DSP around the int8 network) against torch and TFLite-Micro, SQNR and PESQ-WB
  on 20 utterances;
* the Cortex-M4 / M7 ELFs under qemu-system-arm equal the host build (skipped, with the reason,
  only where the Arm toolchain or QEMU is not installed), with flash / RAM / instructions;
* the fast build (``arith="fast"``, generated from the same TFLite-Micro artifact): within its
  stated int8 bound of TFLite-Micro, PCM parity with torch, PESQ-WB within 0.02 of
  TFLite-Micro on 20 utterances, its Cortex-M ELFs equal to its host build and cheaper per hop
  than the exact build.
"""

import logging
import subprocess

import numpy as np
import pytest
import torch
from syspkgs import require

from qsa.export.c_export import (
    HOST_HARNESS,
    PCM_HARNESS,
    arm_toolchain,
    build_host,
    c_network_outputs,
    eval_utterances,
    generate_c,
    host_cc,
    network_frames,
    pesq_c_vs_tflm,
    quantize_multiplier,
    read_graph,
    tflm_network_outputs,
)

logging.getLogger("torch.__trace").propagate = False

needs_cc = pytest.mark.skipif(host_cc() is None, reason="no host C compiler (cc/gcc/clang)")

# the module's one full export (TFLite-Micro conversion, C build, TFLite-Micro / torch / QEMU
# verification) takes ~9 minutes on 2 idle cores, in the setup of whichever test runs first:
# past the suite's 600 s default when the machine is shared
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def model():
    import qsa

    return qsa.load("qcgan-35k").eval()


@pytest.fixture(scope="module")
def c_export(model, tmp_path_factory):
    if host_cc() is None:
        require(["gcc"], "the host C build")
    from qsa.export.c_export import export_c

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("qcgan35k-c")
    return export_c(model, out, model_name="qcgan-35k")


@pytest.fixture(scope="module")
def c_export_fast(c_export, model, tmp_path_factory):
    """The fast build (arith="fast") generated from c_export's TFLite-Micro artifact and
    verified as export_c verifies (export_c_from_tflm: the same stage export_c ends with)."""
    from qsa.export.c_export import export_c_from_tflm
    from qsa.export.calib import verification_utterance
    from qsa.export.exporters import ExportResult

    src = c_export.artifact.parent
    tflm = ExportResult("tflm", "int8", src / "model.tflite", src / "report.json",
                        c_export.report, [src / "model.tflite"])
    step = model.step_module()  # the model c_export exported (the torch reference)
    out = tmp_path_factory.mktemp("qcgan35k-c-fast")
    return export_c_from_tflm(tflm, step, np.asarray(verification_utterance(), np.float32), out,
                              "qcgan-35k", arith="fast")



# -- fast: the fixed-point primitives against an independent Python reference ---------------

def _run_c(folder, stdin: str = "") -> subprocess.CompletedProcess:
    """Compile ``folder/t.c`` (with the kernels' qsa_nn.h beside it) for the host and run it on
    ``stdin``; -> the finished process (its stdout)."""
    exe = folder / "t"
    subprocess.run([host_cc(), "-std=c99", "-O2", "-Wall", "-Wno-unused-function", "-o",
                    str(exe), str(folder / "t.c"), f"-I{folder}"], check=True)
    return subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True)


def _srdhm(a: int, b: int) -> int:
    if a == b == -(2**31):
        return 2**31 - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    v = ab + nudge
    return (abs(v) >> 31) * (1 if v >= 0 else -1)  # C division: truncation towards zero


def _rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if rem > thr else 0)


def _mbqm(x: int, m: int, shift: int) -> int:
    ls, rs = max(shift, 0), max(-shift, 0)
    v = (x << ls) & 0xFFFFFFFF
    v = v - (1 << 32) if v >= 1 << 31 else v
    return _rdbpot(_srdhm(v, m), rs)


@needs_cc
def test_fixed_point_primitives_match_reference(tmp_path):
    """qsa_srdhm / qsa_rdbpot / qsa_mbqm (the requantisation every kernel ends with) against
    gemmlowp's definitions written out in Python, on random and edge values."""
    from qsa.export.c_kernels import QSA_NN_H

    rng = np.random.default_rng(0)
    xs = [int(v) for v in rng.integers(-(2**20), 2**20, 300)] + [0, 1, -1, 2**31 - 1, -(2**31)]
    ms = [int(v) for v in rng.integers(2**30, 2**31 - 1, 300)] + [2**30, 2**31 - 1] * 2 + [1]
    shifts = [int(v) for v in rng.integers(-12, 3, 305)]
    (tmp_path / "qsa_nn.h").write_text(QSA_NN_H)
    (tmp_path / "t.c").write_text(
        '#include <stdio.h>\n#include "qsa_nn.h"\nint main(void){long a,b;int s;'
        'while(scanf("%ld %ld %d",&a,&b,&s)==3) printf("%d %d %d\\n",'
        "qsa_srdhm((int32_t)a,(int32_t)b),qsa_rdbpot((int32_t)a,s<0?-s:s),"
        "qsa_mbqm((int32_t)(a>>8),(int32_t)b,s));return 0;}\n")
    lines = "\n".join(f"{a} {b} {s}" for a, b, s in zip(xs, ms, shifts, strict=True))
    got = _run_c(tmp_path, lines)
    for (a, b, s), row in zip(zip(xs, ms, shifts, strict=True), got.stdout.splitlines(),
                              strict=True):
        want = (_srdhm(a, b), _rdbpot(a, abs(s)), _mbqm(a >> 8, b, s))
        assert tuple(int(v) for v in row.split()) == want, (a, b, s)


@needs_cc
def test_fast_requantisation_equals_the_reference(tmp_path):
    """qsa_rqf (SMMLAR form: 2 acc, c = 2^(e-1) + off 2^e, the sign of acc for the sign of
    the product) gives qsa_rq(acc, m, e) + off, saturated, for |acc| < 2^30 and e in 1..22,
    on random and edge values (acc = 0, +-1, +-(2^30 - 1), products rounding to 0 from
    below); qsa_rqterm gives qsa_rq unsaturated."""
    from qsa.export.c_kernels import QSA_NN_H

    rng = np.random.default_rng(1)
    n = 4000
    acc = rng.integers(-(2**30) + 1, 2**30, n)
    acc[:600] = rng.integers(-3000, 3000, 600)
    acc[600:606] = [0, 1, -1, 2**30 - 1, -(2**30) + 1, -2]
    m = rng.integers(2**30, 2**31 - 1, n)
    m[:50] = 2**30
    e = rng.integers(1, 23, n)
    off = rng.integers(-128, 128, n)
    (tmp_path / "qsa_nn.h").write_text(QSA_NN_H)
    (tmp_path / "t.c").write_text(
        '#include <stdio.h>\n#include "qsa_nn.h"\nint main(void){long a,m;int e,o;'
        'while(scanf("%ld %ld %d %d",&a,&m,&e,&o)==4){int32_t r=qsa_rq((int32_t)a,(int32_t)m,e);'
        'printf("%d %d %d %d\\n",qsa_rqf((int32_t)(2*a),(int32_t)m,e,qsa_rqc(e,o)),'
        'qsa_sat8(r+o),qsa_rqterm((int32_t)(2*a),(int32_t)m,e,1<<(e-1),-1),r);}return 0;}\n')
    lines = "\n".join(f"{a} {b} {c} {d}" for a, b, c, d in zip(acc, m, e, off, strict=True))
    got = _run_c(tmp_path, lines)
    rows = np.array([[int(v) for v in r.split()] for r in got.stdout.splitlines()])
    assert len(rows) == n
    np.testing.assert_array_equal(rows[:, 0], rows[:, 1])
    np.testing.assert_array_equal(rows[:, 2], rows[:, 3])


def test_quantize_multiplier_matches_tflite():
    """QuantizeMultiplier: Q0.31 significand, round half away from zero, 2^31 carried."""
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(0.0) == (0, 0)
    m, s = quantize_multiplier(0.0123)
    assert 2**30 <= m < 2**31 and abs(m * 2.0 ** (s - 31) - 0.0123) < 1e-9
    assert quantize_multiplier(1 - 2**-40) == (1 << 30, 1)  # rounds up to 2^31: carried


# -- the export --------------------------------------------------------------------------------

@pytest.mark.slow
def test_c_network_equals_tflm_on_real_frames(c_export):
    """The export's own check: every int8 output and state value of every step on the
    verification utterance equal TFLite-Micro's."""
    net = c_export.report["c"]["network"]
    assert net["network_int8_identical"] and net["differing_values"] == 0
    assert net["frames"] >= 100 and net["values_per_frame"] > 6000
    assert c_export.report["verified"]
    names = {p.name for p in c_export.files}
    assert {"qsa_nn.h", "qsa_net.h", "qsa_net.c", "qsa_enhancer.c", "qsa_enhancer.h",
            "main_example.c", "Makefile", "model.tflite"} <= names


@pytest.mark.slow
@needs_cc
def test_every_intermediate_tensor_equals_tflm(c_export, model, tmp_path):
    """A debug build keeps every tensor; each op's output equals TFLite-Micro's on 25 real
    frames (the interpreter made to output all of them), so every kernel is checked where
    it runs, not only through the network's outputs."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    tfl = c_export.artifact.parent / "model.tflite"
    net = generate_c(tfl, tmp_path, debug=True)
    exe = build_host(tmp_path, HOST_HARNESS, "dbg", extra=("-DQSA_DEBUG_DUMP",))
    txt = (tmp_path / "qsa_net.c").read_text()
    dbg = [int(v) for v in txt.split("qsa_net_debug_tensor[] = {")[1].split("}")[0].split(",")]
    g = read_graph(tfl)
    m = S.ModelT.InitFromPackedBuf(bytearray(tfl.read_bytes()), 0)
    m.subgraphs[0].outputs = np.asarray(list(g.outputs) + dbg, np.int32)
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    all_out = tmp_path / "all_outputs.tflite"
    all_out.write_bytes(bytes(b.Output()))
    from qsa.export.calib import verification_utterance

    wave = np.asarray(verification_utterance(), np.float32)
    frames = network_frames(model.step_module(), net.inputs[0], wave)[:25]
    want = tflm_network_outputs(all_out, frames, arena_size=4 << 20, n_outputs=len(g.outputs))
    got = c_network_outputs(exe, frames, tmp_path)
    n_main = sum(g.tensors[i].size for i in g.outputs)
    assert want.shape == got.shape and want.shape[1] == n_main + sum(g.tensors[i].size
                                                                     for i in dbg)
    # the C dump: outputs, the state struct (the graph's state outputs, in order), then every
    # debug tensor, as the interpreter lists them
    for k in range(len(frames)):
        bad = np.flatnonzero(got[k] != want[k])
        assert bad.size == 0, f"frame {k}: {bad.size} values differ, first at {bad[0]}"
    assert len(dbg) > 200 and net.macs > 0  # every op's output


@pytest.mark.slow
def test_c_pcm_parity(c_export):
    """PCM in, PCM out: the C DSP + int8 network against torch (the int8 floor, as close as the
    TFLite-Micro runtime gets) and against TFLite-Micro with the numpy DSP (float32 rounding
    only: the network integers are the same)."""
    from qsa.export import INT8_SQNR_FLOOR_DB

    pcm = c_export.report["c"]["pcm"]
    assert pcm["sqnr_db_vs_torch_fp32"] >= INT8_SQNR_FLOOR_DB
    assert abs(pcm["sqnr_db_vs_torch_fp32"] - pcm["tflm_sqnr_db_vs_torch_fp32"]) < 0.5
    assert pcm["sqnr_db_vs_tflm"] >= 50.0


@pytest.mark.slow
@needs_cc
@pytest.mark.parametrize("build", ["c_export", "c_export_fast"])
def test_c_pesq_within_002_of_tflm_on_20_utterances(build, request, tmp_path):
    """Acceptance, for the exact and the fast build: PESQ-WB of the C build within 0.02 of the
    TFLite-Micro runtime, averaged over 20 noisy utterances (and per utterance within 0.05)."""
    src = request.getfixturevalue(build).artifact.parent
    for p in src.glob("*.[ch]"):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    exe = build_host(tmp_path, PCM_HARNESS, "pcm", sources=("qsa_net.c", "qsa_enhancer.c"))
    r = pesq_c_vs_tflm(exe, src / "model.tflite", eval_utterances(20), 128, tmp_path)
    assert r["utterances"] == 20
    assert abs(r["pesq_wb_c"] - r["pesq_wb_tflm"]) <= 0.02, r
    assert r["max_abs_diff"] <= 0.05, r


@pytest.mark.slow
@needs_cc
def test_generated_folder_builds_with_its_makefile(c_export, tmp_path):
    """The folder is self-contained: its Makefile builds the host binary with -Werror -pedantic
    (C99, nothing outside the folder)."""
    import shutil

    if shutil.which("make") is None:
        require(["make"], "the generated Makefile")
    src = c_export.artifact.parent
    for p in list(src.glob("*.[ch]")) + [src / "Makefile"]:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    r = subprocess.run(["make", "qsa_pcm", f"CC={host_cc()}", "CFLAGS=-std=c99 -pedantic -O2 "
                        "-Wall -Wextra -Werror -Wno-unused-function -ffp-contract=off"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    head = (src / "qsa_net.h").read_text()
    assert "MACs per step" in head and "activation arena" in head
    assert ("Cortex-M figures not measured" in head) == (arm_toolchain() is not None)


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7"])
def test_cortex_m_under_qemu_equals_host(c_export, cpu):
    """The ELF built with arm-none-eabi-gcc -O2 (hard float) runs the utterance under
    qemu-system-arm and its PCM equals the host build's; flash, RAM and instructions are
    measured (acceptance for the M4: flash <= 64 KB with all code, RAM <= 48 KB with stack)."""
    why = arm_toolchain()
    if why:
        require([why], "the Cortex-M build and its QEMU run")
    r = c_export.report["c"]["mcu"][cpu]
    assert r["equal_to_host"], r
    assert r["hops"] == c_export.report["c"]["network"]["frames"]
    assert 0 < r["stack_bytes"] < 16384 and r["flash_bytes"] > 35000
    assert r["instructions_per_hop_mean"] > 100_000  # counted, not estimated
    assert r["ram_bytes"] <= 48 * 1024, r
    if cpu == "cortex-m4":
        assert r["flash_bytes"] <= 64 * 1024, r


@pytest.mark.slow
@needs_cc
def test_c_runtime_streams_like_the_host_build(c_export, tmp_path):
    """CRuntime (kind "c": the folder built as a shared library, called through ctypes with
    the state as bytes) streams the utterance hop by hop to the same PCM as the host binary."""
    from qsa.export.c_export import CRuntime, run_host_pcm, to_pcm16
    from qsa.export.calib import verification_utterance

    src = c_export.artifact.parent
    rt = CRuntime(src)
    wave = np.asarray(verification_utterance(), np.float32)
    y = rt.run_utterance(wave)
    assert rt.kind == "c" and rt.hop == 128 and y.shape == (len(wave) // 128 * 128,)
    for p in src.glob("*.[ch]"):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    exe = build_host(tmp_path, PCM_HARNESS, "pcm", sources=("qsa_net.c", "qsa_enhancer.c"))
    host = run_host_pcm(exe, to_pcm16(wave), tmp_path).astype(np.float32) / 32768.0
    np.testing.assert_array_equal(y, host[: len(y)])


def test_profiles_use_the_measured_c_build():
    """cortex-m4 / cortex-m7 carry the measured C build of qcgan-35k (QEMU instruction
    counts, ELF flash, RAM with stack): the budget check of a C export uses it instead of the
    MAC estimate, and says so; other models and other targets keep the estimate."""
    from qsa.export.profiles import PROFILES, check_budget

    report = {"model": "qcgan-35k", "target": "c", "precision": "int8", "bytes": 67552,
              "mac_per_s": 36882500,
              "memory": {"arena_bytes": 94640}, "sample_rate": 16000,
              "io": {"hop": 128, "state_shapes": [[1, 31, 80]]}}
    for cpu in ("cortex-m4", "cortex-m7"):
        m = PROFILES[cpu].measured[0]
        assert m.model == "qcgan-35k" and "icount" in m.how and m.hop_s == 0.008
        v = check_budget(report, cpu)
        assert v["basis"] == "measured" and v["measured"]["instructions_per_hop"] > 100_000
        assert v["cycles_per_s"] == int(m.instructions_per_hop / m.hop_s)
        assert (v["flash_bytes"], v["ram_bytes"]) == (m.flash_bytes, m.ram_bytes)
        assert round(v["load"], 4) == round(m.instructions_per_hop / m.hop_s /
                                            PROFILES[cpu].cpu_hz, 4)
        if not v["fits"]:
            assert any("measured CPU load" in t for t in v["violations"])
    est = check_budget({**report, "model": "toy"}, "cortex-m4")
    assert est["basis"] == "estimate" and est["measured"] is None
    tflm = check_budget({**report, "target": "tflm"}, "cortex-m4")  # not the C build's figure
    assert tflm["basis"] == "estimate"


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7"])
def test_export_report_and_header_carry_the_measurement(c_export, cpu):
    """A C export's own QEMU run is what its budget check uses, and the generated header
    states flash, RAM and instructions per hop for each core."""
    from qsa.export.profiles import check_budget

    why = arm_toolchain()
    if why:
        require([why], "the Cortex-M build and its QEMU run")
    r = c_export.report["c"]["mcu"][cpu]
    v = check_budget(c_export.report, cpu)
    assert v["basis"] == "measured"
    assert v["measured"]["instructions_per_hop"] == round(r["instructions_per_hop_mean"])
    assert v["flash_bytes"] == r["flash_bytes"] and v["ram_bytes"] == r["ram_bytes"]
    head = (c_export.artifact.parent / "qsa_net.h").read_text()
    assert f"{r['instructions_per_hop_mean']:,.0f} instructions per hop" in head
    assert f"flash {r['flash_bytes']:,} B" in head and cpu in head


@pytest.mark.slow
@needs_cc
def test_c_strength_control(c_export):
    """qsa_set_atten_lim: 0 dB gives the input itself, delayed by the STFT (n_fft - hop);
    12 dB gives qsa.enhancement's mix (1 - g) enhanced + g input, g = 10^(-12/20), done in
    float before the int16 rounding (so within one LSB of mixing the rounded outputs); no
    limit leaves the output as it was."""
    from qsa.export.c_export import CRuntime, to_pcm16
    from qsa.export.calib import verification_utterance

    src = c_export.artifact.parent
    wave = np.asarray(verification_utterance(), np.float32)[: 128 * 60]
    x = to_pcm16(wave).astype(np.float32) / 32768.0
    y = CRuntime(src).run_utterance(wave)
    np.testing.assert_array_equal(CRuntime(src, None).run_utterance(wave), y)
    bypass = CRuntime(src, 0.0).run_utterance(wave)
    np.testing.assert_array_equal(bypass[128:], x[: len(x) - 128])
    assert not bypass[:128].any()
    g = np.float32(10 ** (-12 / 20))
    dry = np.concatenate([np.zeros(128, np.float32), x[: len(x) - 128]])
    mixed = CRuntime(src, 12).run_utterance(wave)
    assert np.abs(mixed - ((1 - g) * y + g * dry)).max() <= 1.01 / 32768
    assert np.abs(mixed - y).max() > 100 / 32768  # it did something


@needs_cc
def test_hamilton_kernel_equals_the_selection_kernel(tmp_path):
    """qsa_bmm_ham (4 requantisations per column, the negative components as 2 off - the
    positive ones) gives qsa_bmm_sel's integers wherever the export's check
    (_negation_is_reflection, on all 256 inputs) admits it, on every int8 input value; and
    the check's Python requantisation is qsa_rq's."""
    from qsa.export.c_export import _HAMILTON_ROWS, _negation_is_reflection, _requant_py
    from qsa.export.c_kernels import QSA_NN_H

    rng = np.random.default_rng(2)
    cases = []
    while len(cases) < 24:
        q, b_off = int(rng.integers(1, 128)), int(rng.integers(-127, 128))
        m, s = quantize_multiplier(float(rng.uniform(0.2, 1.2)) / q)
        off = int(rng.integers(-40, 40))
        if -22 <= s <= -1 and _negation_is_reflection(q, b_off, m, -s, off):
            cases.append((q, b_off, m, -s, off))
    (tmp_path / "qsa_nn.h").write_text(QSA_NN_H)
    sel = ", ".join(str(v) for v in _HAMILTON_ROWS)
    (tmp_path / "t.c").write_text(
        '#include <stdio.h>\n#include "qsa_nn.h"\n'
        "int main(int argc,char**argv){int q,bo,m,e,o,i;long x;"
        "static int8_t B[4*64],a[16*64],b[16*64];"
        f"static const uint8_t sel[16]={{{sel}}};"
        "for(i=0;i<256;++i)B[i]=(int8_t)(i-128);"
        'if(argc>1){while(scanf("%ld %d %d",&x,&m,&e)==3)printf("%d\\n",qsa_rq((int32_t)x,m,e));'
        "return 0;}"
        'while(scanf("%d %d %d %d %d",&q,&bo,&m,&e,&o)==5){int d=0;'
        "qsa_bmm_sel(a,B,bo,1,0,16,4,64,sel,2*q,m,e,o);qsa_bmm_ham(b,B,bo,1,0,64,2*q,m,e,o);"
        'for(i=0;i<16*64;++i)d+=a[i]!=b[i];printf("%d\\n",d);}'
        "return 0;}\n")
    lines = "\n".join(" ".join(str(v) for v in c) for c in cases)
    got = _run_c(tmp_path, lines)
    assert got.stdout.split() == ["0"] * len(cases)
    accs = [int(v) for v in rng.integers(-(2**24), 2**24, 400)] + [0, 1, -1, 2**29, -(2**29)]
    for _, _, m, e, _ in cases[:4]:
        stdin = "\n".join(f"{a} {m} {e}" for a in accs)
        got = subprocess.run([str(tmp_path / "t"), "rq"], input=stdin, capture_output=True,
                             text=True, check=True)
        assert [int(v) for v in got.stdout.split()] == [_requant_py(a, m, e) for a in accs]


@pytest.mark.slow
@needs_cc
def test_lean_kernels_equal_the_reference_build(c_export, model, tmp_path):
    """The export's default build (the lean kernels: ADD with a bias's terms per call, the
    Hamilton expansion, CONV_2D through qsa_fcs, ...) and the build with the previous kernels
    only (generate_c(lean=False), kept as the exact fallback) give the same int8 outputs and
    state on every step of the verification utterance."""
    from qsa.export.calib import verification_utterance

    tfl = c_export.artifact.parent / "model.tflite"
    wave = np.asarray(verification_utterance(), np.float32)
    outs = []
    for lean in (True, False):
        d = tmp_path / f"lean{int(lean)}"
        net = generate_c(tfl, d, lean=lean)
        text = (d / "qsa_net.c").read_text()
        assert ("qsa_bmm_ham(" in text and "qsa_fcx(" in text and "qsa_convx(" in text) == lean
        assert ("fused into its consumers (qsa_xham)" in text) == lean
        frames = network_frames(model.step_module(), net.inputs[0], wave)
        outs.append(c_network_outputs(build_host(d, HOST_HARNESS, "net"), frames, d))
    np.testing.assert_array_equal(outs[0], outs[1])


@needs_cc
def test_blocked_kernels_equal_the_reference_kernels(tmp_path):
    """qsa_fcx (four rows per block, rows sign-extended once; small weights expanded once;
    a leftover row as four copies of itself), qsa_fcxr (activation weights with offsets, the
    offsets' terms as one more group) and qsa_convx (four pixels of a row per block,
    zero-point padding) give qsa_fc's / qsa_conv's integers on random int8 data, for row
    counts with and without leftovers, per-channel requantisation with right shifts 1..22."""
    from qsa.export.c_kernels import QSA_NN_H

    (tmp_path / "qsa_nn.h").write_text(QSA_NN_H)
    (tmp_path / "t.c").write_text(r"""#include <stdio.h>
#include <stdlib.h>
#include "qsa_nn.h"
static uint32_t s = 1;
static int32_t rnd(int32_t n) { s = s * 1103515245u + 12345u; return (int32_t)((s >> 8) % n); }
int main(void) {
  static int8_t x[4096], w[8192], a[4096], b[4096], sh[64], fz[64];
  static int32_t kb[64], m[64], fs[4096];
  int t, i, bad = 0;
  for (t = 0; t < 60; ++t) {
    int rows = 1 + rnd(13), depth = 4 * (1 + rnd(t % 2 ? 8 : 40)), units = 1 + rnd(40);
    int xo = rnd(256) - 128, oo = rnd(256) - 128;
    for (i = 0; i < rows * depth; ++i) x[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < units * depth; ++i) w[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < units; ++i) {
      int k, sw = 0;
      for (k = 0; k < depth; ++k) sw += w[i * depth + k];
      kb[i] = rnd(20000) - 10000 + xo * sw;
      m[i] = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
      sh[i] = (int8_t)(-1 - rnd(22));
    }
    qsa_fc((int8_t *)a, x, 0, w, 0, kb, rows, depth, units, m, sh, 1, oo, -128, 127, 0);
    qsa_fcx((int8_t *)b, x, w, kb, rows, depth, units, m, sh, 1, oo, 0);
    for (i = 0; i < rows * units; ++i) bad += a[i] != b[i];
    if (depth <= 128 && (rows / 4 + rows % 4) * (depth + 4) <= 256) {
      /* activation weights with an offset: qsa_fcxr against qsa_fc's runtime sums */
      int wo = rnd(256) - 128;
      for (i = 0; i < units; ++i) kb[i] = rnd(20000) - 10000;
      qsa_fc((int8_t *)a, x, xo, w, wo, kb, rows, depth, units, m, sh, 0, oo, -128, 127, 1);
      qsa_fcxr((int8_t *)b, x, xo, w, wo, kb, rows, depth, units, m[0], sh[0], oo);
      for (i = 0; i < rows * units; ++i) bad += a[i] != b[i];
    }
  }
  for (t = 0; t < 40; ++t) {
    qsa_conv_p p;
    int C = 4 * (1 + rnd(4)), KH = 1 + rnd(3), OC = 1 + rnd(8), IH = 3 + rnd(20);
    int W = 4 * (1 + rnd(2));
    int SH = 1 + rnd(2), PH = rnd(KH), OH = (IH + 2 * PH - KH) / SH + 1;
    p.batches = 1; p.in_h = IH; p.in_w = W; p.in_c = C; p.out_h = OH; p.out_w = W; p.out_c = OC;
    p.k_h = KH; p.k_w = 1; p.stride_h = SH; p.stride_w = 1; p.dil_h = 1; p.dil_w = 1;
    p.pad_h = PH; p.pad_w = 0; p.depth_mult = 1; p.in_off = rnd(256) - 128;
    p.out_off = rnd(256) - 128; p.lo = -128; p.hi = 127;
    for (i = 0; i < IH * W * C; ++i) x[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < OC * KH * C; ++i) w[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < OC; ++i) {
      int k, sw = 0;
      for (k = 0; k < KH * C; ++k) sw += w[i * KH * C + k];
      fz[i] = 0;
      kb[i] = rnd(2000) - 1000;
      m[i] = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
      sh[i] = (int8_t)(-1 - rnd(22));
      for (k = 0; k < KH; ++k) {
        int c, f = 0;
        for (c = 0; c < C; ++c) f += w[(i * KH + k) * C + c];
        fs[i * KH + k] = f;
      }
      /* qsa_convx: zero-point padding, the input offset over all taps in the bias */
      m[32 + i] = kb[i] + p.in_off * sw;
    }
    qsa_conv((int8_t *)a, x, w, kb, m, sh, &p, fs);
    qsa_convx((int8_t *)b, x, w, m + 32, m, sh, &p, 0);
    for (i = 0; i < OH * W * OC; ++i) bad += a[i] != b[i];
  }
  for (t = 0; t < 40; ++t) {
    /* the Hamilton expansion fused (qsa_xham): qsa_fcx / qsa_convx on its input B with the
     * weights ordered (column, component) against qsa_bmm_ham's materialised expansion */
    static int8_t B[1024], xx[4096], wp[8192];
    qsa_ham_p h;
    qsa_conv_p p;
    int N = 1 + rnd(12), nb = 1 + rnd(5), units = 1 + rnd(20), D = 4 * N, u, c, k;
    int oo = rnd(256) - 128, KH = 1 + rnd(3), SH = 1 + rnd(2), PH = rnd(KH), OC = 1 + rnd(8);
    h.m = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
    h.b_off = (int16_t)(rnd(256) - 128);
    h.q2 = (int16_t)(2 * (1 + rnd(127)));
    h.e = (int8_t)(7 + rnd(4));
    h.off = (int8_t)(rnd(64) - 32);
    for (i = 0; i < 4 * N * nb; ++i) B[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < units * D; ++i) w[i] = (int8_t)(rnd(256) - 128);
    for (u = 0; u < units; ++u) {
      kb[u] = rnd(20000) - 10000;
      m[u] = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
      sh[u] = (int8_t)(-1 - rnd(22));
      for (c = 0; c < 4; ++c)
        for (k = 0; k < N; ++k) wp[u * D + 4 * k + c] = w[u * D + c * N + k];
    }
    qsa_bmm_ham(xx, B, h.b_off, nb, 4 * N, N, h.q2, h.m, h.e, h.off);
    qsa_fcx((int8_t *)a, xx, w, kb, 4 * nb, D, units, m, sh, 1, oo, 0);
    qsa_fcx((int8_t *)b, B, wp, kb, 4 * nb, D, units, m, sh, 1, oo, &h);
    for (i = 0; i < 4 * nb * units; ++i) bad += a[i] != b[i];
    /* CONV_2D: B (1, IH, 4, N) expanded to (1, IH, 4, 4N), four pixels a row */
    p.batches = 1; p.in_h = 3 + rnd(12); p.in_w = 4; p.in_c = D;
    p.out_h = (p.in_h + 2 * PH - KH) / SH + 1; p.out_w = 4; p.out_c = OC;
    p.k_h = KH; p.k_w = 1; p.stride_h = SH; p.stride_w = 1; p.dil_h = 1; p.dil_w = 1;
    p.pad_h = PH; p.pad_w = 0; p.depth_mult = 1; p.in_off = -h.off; p.out_off = oo;
    p.lo = -128; p.hi = 127;
    if (N > 4) continue;
    for (i = 0; i < 4 * N * p.in_h; ++i) B[i] = (int8_t)(rnd(256) - 128);
    for (u = 0; u < OC; ++u)
      for (k = 0; k < KH; ++k)
        for (c = 0; c < 4; ++c)
          for (i = 0; i < N; ++i)
            wp[(u * KH + k) * D + 4 * i + c] = w[(u * KH + k) * D + c * N + i];
    qsa_bmm_ham(xx, B, h.b_off, p.in_h, 4 * N, N, h.q2, h.m, h.e, h.off);
    qsa_convx((int8_t *)a, xx, w, kb, m, sh, &p, 0);
    qsa_convx((int8_t *)b, B, wp, kb, m, sh, &p, &h);
    for (i = 0; i < p.out_h * 4 * OC; ++i) bad += a[i] != b[i];
  }
  printf("%d\n", bad);
  return 0;
}
""")
    assert _run_c(tmp_path).stdout.split() == ["0"]


# -- the fast build (arith="fast") --------------------------------------------------------------

def test_fast_arith_is_checked(tmp_path):
    """arith is "exact" or "fast"; the fast build has no debug build (its intermediates are not
    TFLite-Micro's) and builds on the lean kernels: each refused with the fix named."""
    from qsa.export.c_export import export_c
    from qsa.export.errors import ExportError

    with pytest.raises(ExportError, match="expected one of exact, fast"):
        generate_c(tmp_path / "none.tflite", tmp_path, arith="quick")
    with pytest.raises(ExportError, match="debug=False"):
        generate_c(tmp_path / "none.tflite", tmp_path, arith="fast", debug=True)
    with pytest.raises(ExportError, match="expected one of exact, fast"):
        export_c(None, tmp_path, arith="int4")


def test_cli_c_arith_needs_target_c(tmp_path):
    """`qsa export --c-arith fast` with another target is a user error (exit 2, the fix named),
    raised before any model is loaded."""
    import sys

    r = subprocess.run([sys.executable, "-m", "qsa.cli", "export", "qcgan-35k", "--target",
                        "onnx", "--c-arith", "fast", "-o", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "--c-arith fast applies to --target c only" in r.stderr


@pytest.mark.slow
def test_fast_build_within_its_bound_of_tflm(c_export_fast):
    """The fast build's int8 outputs and state against TFLite-Micro on every step of the
    verification utterance: within the stated bound (C_FAST_MAX_ABS_INT8 / _MEAN_ per graph
    output tensor), checked by the export itself; its PCM parity with torch holds the int8 floor
    and stays within 1 dB of TFLite-Micro's; the folds were made."""
    from qsa.export import INT8_SQNR_FLOOR_DB
    from qsa.export.c_export import C_FAST_MAX_ABS_INT8, C_FAST_MEAN_ABS_INT8

    c = c_export_fast.report["c"]
    net = c["network"]
    assert c["arith"] == net["arith"] == "fast" and c_export_fast.report["verified"]
    assert net["within_bound"] and net["frames"] >= 100
    assert net["bound"] == {"max_abs_int8": C_FAST_MAX_ABS_INT8,
                            "mean_abs_int8": C_FAST_MEAN_ABS_INT8}
    assert len(net["per_tensor"]) == 6  # two network outputs, four state tensors
    for r in net["per_tensor"]:
        assert r["max_abs_diff"] <= C_FAST_MAX_ABS_INT8, r
        assert r["mean_abs_diff"] <= C_FAST_MEAN_ABS_INT8, r
    assert net["max_abs_diff"] == max(r["max_abs_diff"] for r in net["per_tensor"])
    assert net["folded_adds"] > 0 and net["layer_norms"] > 0 and net["silu_tables"] > 0
    pcm = c["pcm"]
    assert pcm["sqnr_db_vs_torch_fp32"] >= INT8_SQNR_FLOOR_DB
    assert pcm["sqnr_db_vs_torch_fp32"] >= pcm["tflm_sqnr_db_vs_torch_fp32"] - 1.0, pcm
    text = (c_export_fast.artifact.parent / "qsa_net.c").read_text()
    assert "#define QSA_ARITH_FAST 1" in text and "qsa_lnorm(" in text
    head = (c_export_fast.artifact.parent / "qsa_net.h").read_text()
    assert "arith fast" in head


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7"])
def test_fast_cortex_m_under_qemu_equals_host(c_export, c_export_fast, cpu):
    """The fast build's ELF under qemu-system-arm gives its host build's PCM exactly (the DSP
    extension's SMLAD / SSAT and the portable C compute the same integers), within the M4's
    flash and RAM, in fewer instructions per hop than the exact build (both counted under
    -icount shift=0 on the same utterance)."""
    why = arm_toolchain()
    if why:
        require([why], "the Cortex-M build and its QEMU run")
    r = c_export_fast.report["c"]["mcu"][cpu]
    exact = c_export.report["c"]["mcu"][cpu]
    assert r["equal_to_host"], r
    assert r["hops"] == c_export_fast.report["c"]["network"]["frames"]
    assert r["ram_bytes"] <= 48 * 1024, r
    if cpu == "cortex-m4":
        assert r["flash_bytes"] <= 64 * 1024, r
    assert 100_000 < r["instructions_per_hop_mean"] < exact["instructions_per_hop_mean"]


def _run_c_m4(folder) -> str:
    """Build ``folder/t.c`` (qsa_nn.h beside it) for the Cortex-M4 (the mps2-an386 board of
    build_mcu: -O2, hard float, the DSP extension) and run it under qemu-system-arm; its
    stdout (printf through semihosting)."""
    from qsa.export.c_export import MCU_BOARDS, write_mcu_files

    write_mcu_files(folder)
    board = MCU_BOARDS["cortex-m4"]
    elf = folder / "t.elf"
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-O2", "-Wall", "-Wno-unused-function",
                    "-mthumb", *board["flags"], f"-I{folder}", "--specs=rdimon.specs",
                    "-nostartfiles", "-T", str(folder / "mcu/mps2.ld"), "-o", str(elf),
                    str(folder / "t.c"), str(folder / "mcu/startup.c"), "-lm"], check=True)
    r = subprocess.run(["qemu-system-arm", "-M", board["machine"], "-nographic", "-monitor",
                        "none", "-semihosting-config", "enable=on,target=native", "-kernel",
                        str(elf)], capture_output=True, text=True, timeout=600, check=True)
    return r.stdout


@needs_cc
@pytest.mark.parametrize("where", ["host", "cortex-m4"])
def test_fast_blocked_kernels_equal_the_reference_kernels(tmp_path, where):
    """The fast build's qsa_fcx / qsa_convx (QSA_ARITH_FAST: several blocks of four rows per
    qsa_blk4n call, a unit's constants loaded once for all; on the DSP extension one
    assembly loop per unit) give qsa_fc's / qsa_conv's integers on random int8 data: the
    batching changes no value (only the folds do); qsa_bmm_hamt writes qsa_bmm_ham's values,
    in its layout or a transposed one. On the host (portable C) and on the Cortex-M4 under
    QEMU (SMLAD / SSAT, the assembly)."""
    from qsa.export.c_kernels import QSA_NN_H

    if where != "host" and arm_toolchain():
        require([arm_toolchain()], "the Cortex-M build and its QEMU run")
    (tmp_path / "qsa_nn.h").write_text(QSA_NN_H)
    (tmp_path / "t.c").write_text(r"""#include <stdio.h>
#define QSA_ARITH_FAST 1
#include "qsa_nn.h"
#ifdef __ARM_ARCH
extern void initialise_monitor_handles(void);
#endif
static uint32_t s = 7;
static int32_t rnd(int32_t n) { s = s * 1103515245u + 12345u; return (int32_t)((s >> 8) % n); }
int main(void) {
  static int8_t x[16384], w[8192], a[8192], b[8192], sh[64]; /* x: rows depth <= 13,280 */
  static int32_t kb[64], m[64], kx[64], fs[4096];
  int t, i, bad = 0;
#ifdef __ARM_ARCH
  initialise_monitor_handles();
#endif
  for (t = 0; t < 20; ++t) { /* qsa_bmm_hamt: qsa_bmm_ham's layout, then [nb][n][16] */
    int nb = 1 + rnd(3), n = 1 + rnd(40), j, bb;
    qsa_hamt_p h;
    h.m = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)); h.e = (int8_t)(1 + rnd(8));
    h.off = (int8_t)(rnd(80) - 40); h.b_off = (int16_t)(rnd(256) - 128);
    h.q2 = (int16_t)(2 * (1 + rnd(127))); h.nb = (int16_t)nb; h.b_bs = (int16_t)(4 * n);
    h.n = (int16_t)n; h.bs = 16 * n;
    for (i = 0; i < nb * 4 * n; ++i) x[i] = (int8_t)(rnd(256) - 128);
    qsa_bmm_ham(a, x, h.b_off, nb, 4 * n, n, h.q2, h.m, h.e, h.off);
    h.n2 = (int16_t)n; h.s1 = n; h.s2 = 1; h.r1 = 4 * n; h.r2 = n;
    qsa_bmm_hamt(b, x, &h);
    for (i = 0; i < nb * 16 * n; ++i) bad += a[i] != b[i];
    h.n2 = (int16_t)(1 + rnd(n)); h.s1 = 16 * h.n2; h.s2 = 16; h.r1 = 4; h.r2 = 1;
    qsa_bmm_hamt(b, x, &h);
    for (bb = 0; bb < nb; ++bb)
      for (i = 0; i < 16; ++i)
        for (j = 0; j < n; ++j) bad += a[(bb * 16 + i) * n + j] != b[(bb * n + j) * 16 + i];
  }
  for (t = 0; t < 60; ++t) {
    int rows = 4 * (1 + rnd(20)) + (t % 3 == 0 ? 1 + rnd(3) : 0);
    int depth = 4 * (1 + rnd(t % 2 ? 6 : 40)), units = 1 + rnd(24);
    int oo = rnd(256) - 128;
    for (i = 0; i < rows * depth; ++i) x[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < units * depth; ++i) w[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < units; ++i) {
      kb[i] = rnd(20000) - 10000;
      m[i] = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
      sh[i] = (int8_t)(-1 - rnd(22));
    }
    qsa_fc((int8_t *)a, x, 0, w, 0, kb, rows, depth, units, m, sh, 1, oo, -128, 127, 0);
    qsa_fcx((int8_t *)b, x, w, kb, rows, depth, units, m, sh, 1, oo, 0);
    for (i = 0; i < rows * units; ++i) bad += a[i] != b[i];
  }
  for (t = 0; t < 40; ++t) {
    qsa_conv_p p;
    int C = 4 * (1 + rnd(4)), KH = 1 + rnd(3), OC = 1 + rnd(8), IH = 3 + rnd(40);
    int SH = 1 + rnd(2), PH = rnd(KH), OH = (IH + 2 * PH - KH) / SH + 1;
    p.batches = 1; p.in_h = IH; p.in_w = 4; p.in_c = C; p.out_h = OH; p.out_w = 4; p.out_c = OC;
    p.k_h = KH; p.k_w = 1; p.stride_h = SH; p.stride_w = 1; p.dil_h = 1; p.dil_w = 1;
    p.pad_h = PH; p.pad_w = 0; p.depth_mult = 1; p.in_off = rnd(256) - 128;
    p.out_off = rnd(256) - 128; p.lo = -128; p.hi = 127;
    for (i = 0; i < IH * 4 * C; ++i) x[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < OC * KH * C; ++i) w[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < OC; ++i) {
      int k, sw = 0;
      for (k = 0; k < KH * C; ++k) sw += w[i * KH * C + k];
      kb[i] = rnd(2000) - 1000;
      m[i] = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
      sh[i] = (int8_t)(-1 - rnd(22));
      for (k = 0; k < KH; ++k) {
        int c, f = 0;
        for (c = 0; c < C; ++c) f += w[(i * KH + k) * C + c];
        fs[i * KH + k] = f;
      }
      kx[i] = kb[i] + p.in_off * sw; /* zero-point padding: the offset in the bias */
    }
    qsa_conv((int8_t *)a, x, w, kb, m, sh, &p, fs);
    qsa_convx((int8_t *)b, x, w, kx, m, sh, &p, 0, 1);
    for (i = 0; i < OH * 4 * OC; ++i) bad += a[i] != b[i];
  }
  printf("%d\n", bad);
  fflush(stdout); /* the board's exit does not flush */
  return 0;
}
""")
    out = _run_c(tmp_path).stdout if where == "host" else _run_c_m4(tmp_path)
    assert out.split() == ["0"]


_ROUND3_C = r"""#include <stdio.h>
#include "qsa_nn.h"
#ifdef __ARM_ARCH
extern void initialise_monitor_handles(void);
#endif
static uint32_t s = 11, hsh;
static int32_t rnd(int32_t n) { s = s * 1103515245u + 12345u; return (int32_t)((s >> 8) % n); }
static void mix(const int8_t *p, int n) { /* FNV-1a over the outputs */
  int i;
  for (i = 0; i < n; ++i) hsh = (hsh ^ (uint8_t)p[i]) * 16777619u;
}
int main(void) {
  static int8_t x[8192], y[8192], o[8192];
  static int32_t e1[256], bias[64], kb[64], m[64];
  static uint32_t fx[30 * 48 / 2];
  static int8_t sh[64];
  int t, i;
#ifdef __ARM_ARCH
  initialise_monitor_handles();
#endif
  for (i = 0; i < 8192; ++i) { x[i] = (int8_t)(rnd(256) - 128); y[i] = (int8_t)(rnd(256) - 128); }
  hsh = 2166136261u; /* qsa_bmm2: odd and even M, K (the fast build pads K to 4), any N */
  for (t = 0; t < 40; ++t) {
    int M = 1 + rnd(16), K = 1 + rnd(36), N = 1 + rnd(60), nb = 1 + rnd(2);
    qsa_bmm2(o, x, rnd(256) - 128, y, rnd(256) - 128, nb, rnd(2) ? M * K : 0, K * N, M, K, N,
             (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)), 1 + rnd(20), rnd(256) - 128);
    mix(o, nb * M * N);
  }
  printf("bmm2 %lu\n", (unsigned long)hsh);
  hsh = 2166136261u; /* qsa_softmax: the two tables of qcgan-35k, narrow and wide inputs */
  for (t = 0; t < 40; ++t) {
    const int outer = 1 + rnd(20), depth = 1 + rnd(40), span = t % 2 ? 256 : 40;
    const int32_t dmin = t % 4 < 2 ? -124 : -1984;
    qsa_softmax_table(e1, t % 4 < 2 ? 1093758720 : 1909018752, t % 4 < 2 ? 24 : 20, dmin);
    for (i = 0; i < outer * depth; ++i) y[i] = (int8_t)(rnd(span) - span / 2);
    qsa_softmax(o, y, outer, depth, e1, dmin);
    mix(o, outer * depth);
  }
  printf("softmax %lu\n", (unsigned long)hsh);
  hsh = 2166136261u; /* qsa_reduce: the sum over dim 2 (fast: straight from x) and others */
  for (t = 0; t < 40; ++t) {
    const int R = 1 + rnd(30), C = 1 + rnd(6), D = 1 + rnd(20), sf = t % 3;
    const int32_t sft = sf == 0 ? 0 : (sf == 1 ? 1 : -1 - rnd(20));
    int16_t n[4], os[4];
    static int32_t acc[4096];
    n[0] = 1; n[1] = (int16_t)R; n[2] = (int16_t)C; n[3] = (int16_t)D; os[0] = 0;
    if (t % 4 == 3) { os[1] = 1; os[2] = (int16_t)R; os[3] = 0; } /* another kind: general */
    else { os[1] = (int16_t)D; os[2] = 0; os[3] = 1; }
    qsa_reduce(o, x, n, os, t % 4 == 3 ? R * C : R * D, t % 4 == 3 ? D : C, rnd(256) - 128,
               (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)), sft, rnd(256) - 128, acc);
    mix(o, t % 4 == 3 ? R * C : R * D);
  }
  printf("reduce %lu\n", (unsigned long)hsh);
  hsh = 2166136261u; /* qsa_gather4: transposes and slices of a 4-d tensor, the runs of the
                      * decoder (2 bytes, 4 bytes at stride 2, long rows) among them */
  for (t = 0; t < 60; ++t) {
    int16_t n[4], st[4];
    int d[4], perm[4] = {0, 1, 2, 3}, k, tot = 1;
    int stride[4];
    for (k = 0; k < 4; ++k) { d[k] = 1 + rnd(k == 3 ? 20 : 5); }
    if (t % 5 == 0) { d[0] = 1; d[1] = 1 + rnd(30); d[2] = 4; d[3] = 2; }
    stride[3] = 1; stride[2] = d[3]; stride[1] = d[2] * d[3]; stride[0] = d[1] * d[2] * d[3];
    for (k = 3; k > 0; --k) { /* a random order of the dims */
      const int j = rnd(k + 1), tmp = perm[k];
      perm[k] = perm[j];
      perm[j] = tmp;
    }
    if (t % 5 == 0) { perm[0] = 0; perm[1] = 1; perm[2] = 3; perm[3] = 2; }
    for (k = 0; k < 4; ++k) {
      n[k] = (int16_t)d[perm[k]];
      st[k] = (int16_t)stride[perm[k]];
      tot *= d[k];
    }
    qsa_gather4(o, x, n, st);
    mix(o, tot);
  }
  printf("gather4 %lu\n", (unsigned long)hsh);
  hsh = 2166136261u; /* qsa_dwconvs: the fast build's bias and filter pairs from init */
  for (t = 0; t < 30; ++t) {
    qsa_conv_p p;
    const int C = 4 * (1 + rnd(12)), KH = 1 + rnd(3), KW = 1 + rnd(t % 2 ? 10 : 3); /* <= 32 */
    const int IH = 1 + rnd(12), IW = 1 + rnd(6);
    p.batches = 1 + rnd(2); p.in_h = IH; p.in_w = IW; p.in_c = C; p.k_h = KH; p.k_w = KW;
    p.stride_h = 1; p.stride_w = 1; p.dil_h = 1; p.dil_w = 1; p.pad_h = rnd(KH); p.pad_w = rnd(KW);
    p.out_h = IH + 2 * p.pad_h - KH + 1; p.out_w = IW + 2 * p.pad_w - KW + 1;
    if (p.out_h < 1 || p.out_w < 1) continue;
    p.out_c = C; p.depth_mult = 1; p.in_off = rnd(256) - 128; p.out_off = rnd(256) - 128;
    p.lo = -128; p.hi = 127;
    for (i = 0; i < C; ++i) {
      bias[i] = rnd(20000) - 10000;
      m[i] = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30));
      sh[i] = (int8_t)(-1 - rnd(20));
    }
#ifdef QSA_ARITH_FAST
    qsa_dwconvs_init(kb, fx, y, bias, &p);
    qsa_dwconvs(o, x, fx, kb, m, sh, &p);
#else
    (void)kb;
    (void)fx;
    qsa_dwconvs(o, x, y, bias, m, sh, &p);
#endif
    mix(o, p.batches * p.out_h * p.out_w * C);
  }
  printf("dwconvs %lu\n", (unsigned long)hsh);
#ifdef QSA_ARITH_FAST
  { /* round 4: qsa_addprelu (on the DSP extension its columns in assembly) against
     * qsa_addprelu_col (C) on random constants and data; the number of differing values */
    int bad = 0, j;
    for (t = 0; t < 40; ++t) {
      qsa_bcast bc;
      qsa_addprelu_p q;
      const int n2 = 1 + rnd(70), n3 = 1 + rnd(9);
      const int ka = t % 2 ? 2048 : rnd(4097) - 2048, kb2 = t % 2 ? rnd(4097) - 2048 : 2048;
      const int ep = 1 + rnd(22), en = 1 + rnd(22), off = rnd(256) - 128;
      bc.n[0] = 1; bc.n[1] = 1; bc.n[2] = (int16_t)n2; bc.n[3] = (int16_t)n3;
      bc.sa[0] = bc.sa[1] = 0; bc.sa[2] = (int16_t)n3; bc.sa[3] = 1;
      bc.sb[0] = bc.sb[1] = bc.sb[2] = 0; bc.sb[3] = 1;
      q.ka = ka; q.kb = kb2; q.k0 = rnd(200001) - 100000; q.ao = rnd(256) - 128;
      q.mp = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)); q.ep = ep; q.cp = qsa_rqc(ep, off);
      q.mn = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)); q.en = en; q.cn = qsa_rqc(en, off);
      for (i = 0; i < n2 * n3; ++i) {
        x[i] = (int8_t)(rnd(256) - 128);
        y[i] = (int8_t)(rnd(256) - 128);
      }
      for (i = 0; i < n3; ++i) sh[i] = (int8_t)(rnd(256) - 128);
      qsa_addprelu(o, x, y, sh, &bc, &q);
      for (j = 0; j < n3; ++j)
        qsa_addprelu_col(o + 4096 + j, x + j, y + j, n2, n3, sh[j] + q.ao, &q);
      for (i = 0; i < n2 * n3; ++i) bad += o[i] != o[4096 + i];
    }
    printf("addprelu %d\n", bad);
    bad = 0; /* qsa_preluf (its columns in assembly on the DSP extension) = qsa_preluf_col */
    for (t = 0; t < 40; ++t) {
      qsa_bcast bc;
      qsa_preluf_p q;
      const int n2 = 1 + rnd(70), n3 = 1 + rnd(9), off = rnd(256) - 128;
      bc.n[0] = 1; bc.n[1] = 1; bc.n[2] = (int16_t)n2; bc.n[3] = (int16_t)n3;
      bc.sa[0] = bc.sa[1] = 0; bc.sa[2] = (int16_t)n3; bc.sa[3] = 1;
      bc.sb[0] = bc.sb[1] = bc.sb[2] = 0; bc.sb[3] = 1;
      q.in_off = rnd(256) - 128; q.alpha_off = rnd(256) - 128;
      q.m1 = rnd(1 << 30) * 2; q.l1 = 1 + rnd(13); q.e1 = rnd(23); q.c1 = qsa_rqc(1 + rnd(22), off);
      q.k1 = -rnd(2);
      q.m2 = rnd(1 << 30) * 2; q.l2 = 1 + rnd(13); q.e2 = rnd(23); q.c2 = qsa_rqc(1 + rnd(22), off);
      q.k2 = -rnd(2);
      for (i = 0; i < n2 * n3; ++i) x[i] = (int8_t)(rnd(256) - 128);
      for (i = 0; i < n3; ++i) sh[i] = (int8_t)(rnd(256) - 128);
      qsa_preluf(o, x, sh, &bc, &q);
      for (j = 0; j < n3; ++j)
        qsa_preluf_col(o + 4096 + j, x + j, n2, n3, sh[j] + q.alpha_off, &q);
      for (i = 0; i < n2 * n3; ++i) bad += o[i] != o[4096 + i];
    }
    printf("preluf %d\n", bad);
  }
  hsh = 2166136261u; /* round 5: qsa_lnorm (groups of comps x 3 unrolled by QSA_LNORM_N3) */
  for (t = 0; t < 40; ++t) {
    static int8_t lut[256];
    qsa_lnorm_p q;
    const int G = 1 + rnd(17), C = 1 + rnd(4), N = t % 4 ? 3 : 1 + rnd(20), off = rnd(256) - 128;
    q.groups = (int16_t)G; q.comps = (int16_t)C; q.inner = (int16_t)N; q.kq = 0;
    q.mv = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)); q.sv = -1 - rnd(14);
    q.v_off = rnd(256) - 128; q.r_off = rnd(256) - 128;
    q.my = (int32_t)(1073741824u + (uint32_t)rnd(1 << 30)); q.ey = 1 + rnd(20);
    q.cy = qsa_rqc(q.ey, off);
    for (i = 0; i < 256; ++i) lut[i] = (int8_t)(rnd(256) - 128);
    for (i = 0; i < G * C * N; ++i) y[i] = (int8_t)(rnd(256) - 128);
    qsa_lnorm(o, y, lut, &q);
    mix(o, G * C * N);
  }
  printf("lnorm %lu\n", (unsigned long)hsh);
#endif
  fflush(stdout); /* the board's exit does not flush */
  return 0;
}
"""


@needs_cc
@pytest.mark.parametrize("where", ["host", "cortex-m4"])
def test_fast_round3_kernels_equal_the_exact_build(tmp_path, where):
    """The fast build's kernels of tuning round 3 (12-07) print the exact build's integers on
    random data: qsa_bmm2 (K padded to a multiple of 4, rows in interleaved pairs, the DSP
    loop in assembly), qsa_softmax (the rounding divisions as adds and shifts, one SMMLAR),
    qsa_reduce (the sum over dim 2 straight from x), qsa_gather4 (runs chosen per row; the
    8-byte de-interleave), qsa_dwconvs (the bias folded at init, the requantisation as its own
    pass). The same C compiled with and without QSA_ARITH_FAST, on the host (portable C) and
    on the Cortex-M4 under QEMU (SMLAD, the assembly). Round 5 (12-08): qsa_bmm2's row pairs
    in assembly (odd and even M, K, N above); the special paths the exporter switches on
    (QSA_REDUCE_C4: the sums of four unrolled, a shift >= 0 by SMMLAR; QSA_LNORM_N3: layer
    norms of comps x 3 unrolled) print the integers of the build without them."""
    from qsa.export.c_kernels import QSA_NN_H

    if where != "host" and arm_toolchain():
        require([arm_toolchain()], "the Cortex-M build and its QEMU run")
    outs = []
    special = "#define QSA_REDUCE_C4 1\n#define QSA_LNORM_N3 1\n"
    for name, head in (("exact", ""), ("fast", "#define QSA_ARITH_FAST 1\n"),
                       ("special", "#define QSA_ARITH_FAST 1\n" + special)):
        d = tmp_path / name
        d.mkdir()
        (d / "qsa_nn.h").write_text(QSA_NN_H)
        (d / "t.c").write_text(head + _ROUND3_C)
        outs.append(_run_c(d).stdout if where == "host" else _run_c_m4(d))
    exact, fast, spec = ([ln for ln in o.split("\n") if ln] for o in outs)
    assert [ln.split()[0] for ln in exact] == ["bmm2", "softmax", "reduce", "gather4", "dwconvs"]
    assert exact == fast[:-3]
    assert fast[-3:-1] == ["addprelu 0", "preluf 0"]  # round 4's assembly on the M4 = the C
    assert fast[-1].split()[0] == "lnorm"
    assert spec == fast  # round 5's special paths: the same integers
