"""`qsa export`: a model's streaming step to ExecuTorch / LiteRT / TFLite-Micro / ONNX, verified
in the real runtime, with report.json (and the budget check of ``--profile``)."""

from __future__ import annotations

PROFILE_NAMES = ("cortex-m4", "cortex-m7", "cortex-m55", "esp32-s3", "android-arm64")


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="export a model's streaming step (onnx, executorch, litert, tflm), verified",
        description=(
            "Export MODEL's streaming step, run the artifact in its runtime on noisy speech and "
            "compare with PyTorch (fails on mismatch); writes the artifact and report.json "
            "(and for tflm model_data.cc/.h and model_ops.h) into -o DIR."
        ),
    )
    p.add_argument("model", help="a preset name or a packed model file (.qsa), see `qsa info`")
    p.add_argument("--target", required=True, choices=["executorch", "litert", "tflm", "onnx", "c"],
                   help="c: the int8 TFLite-Micro graph as self-contained C99 (PCM in, PCM "
                   "out), built and checked on the host and, when arm-none-eabi-gcc and "
                   "qemu-system-arm are installed, on an emulated Cortex-M4 / M7")
    p.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument(
        "--profile", choices=PROFILE_NAMES, help="check the artifact against a device budget"
    )
    p.add_argument("--c-arith", choices=["exact", "fast"], default="exact",
                   help="--target c only: exact (default) computes TFLite-Micro's integers; "
                   "fast folds the bias ADDs, layer norms and SiLUs into fewer roundings "
                   "(fewer instructions per hop), checked against TFLite-Micro within a stated "
                   "int8 bound and against torch")
    p.add_argument("--force", action="store_true", help="overwrite an existing artifact")
    p.add_argument("--json", action="store_true",
                   help="print report.json (only it: stdout stays valid JSON) instead of a "
                   "summary")
    p.add_argument("--verbose", action="store_true",
                   help="show the converters' and runtimes' own log lines (hidden by default; "
                   "shown anyway when the export fails)")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import warnings

    from qsa.errors import ConfigError

    if args.c_arith != "exact" and args.target != "c":
        raise ConfigError(f"--c-arith {args.c_arith} applies to --target c only (got --target "
                          f"{args.target}); drop --c-arith or use --target c")

    import torch

    from qsa.hub import load

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    model = load(args.model)
    name = args.model.rsplit("/", 1)[-1]
    from qsa.commands.quiet import third_party_quiet

    with third_party_quiet(args.verbose):
        from qsa.export import export_model  # torchao / absl log while importing

        if args.target == "c":  # the int8 TFLite-Micro graph as generated C99, verified
            from qsa.export.c_export import export_c

            result = export_c(model, args.output, model_name=name, force=args.force,
                              arith=args.c_arith)
        else:
            result = export_model(
                model,
                args.target,
                args.precision,
                args.output,
                profile=args.profile,
                model_name=name,
                force=args.force,
            )
    r = result.report
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    mem = r["memory"]
    ram = mem.get("arena_bytes") or mem.get("planned_bytes") or mem.get("activation_tensor_bytes")
    par = r["parity"]
    parity = (
        f"step RMS error {par['step_rms_error_max']:.2e}"
        if "step_rms_error_max" in par
        else f"streamed SQNR {par['stream_sqnr_db_vs_torch_fp32']:.1f} dB"
    )
    lat = r["latency_per_hop"]
    print(f"wrote {result.artifact} ({r['bytes']:,} bytes, {r['bytes_per_param']:.2f} B/param)")
    if "packed_bound_bytes" in r and r["precision"] == "int8":  # an int8 figure only
        gap = r["bytes"] - r["packed_bound_bytes"]
        print(f"  packed bound (1.25 B/param + 24 KB): {r['packed_bound_bytes']:,} bytes, "
              + (f"over by {gap:,}" if gap > 0 else f"{-gap:,} to spare"))
    print(f"  verified in {args.target}: {parity}")
    print(f"  memory: {ram:,} bytes" if ram else "  memory: -")
    b = mem.get("breakdown") or {}
    if all(k in b for k in ("tail_bytes", "nodes", "eval_tensors", "op_data", "head_bytes",
                            "init_planning_bytes")):
        print(f"    = {b['tail_bytes']:,} persistent ({b['nodes']['count']} op nodes "
              f"{b['nodes']['bytes']:,}, {b['eval_tensors']['count']} tensors "
              f"{b['eval_tensors']['bytes']:,}, op data {b['op_data']['bytes']:,}) + "
              f"{b['head_bytes']:,} activations + {b['init_planning_bytes']:,} planning at init "
              f"({b['pointer_bits']}-bit host)")
    print(f"  host latency/hop: median {lat['median_ms']:.3f} ms, p99 {lat['p99_ms']:.3f} ms")
    if "profile" in r:
        v = r["profile"]
        print(
            f"  profile {v['name']}: flash {v['flash_bytes']:,}/{v['flash_budget']:,} B, RAM "
            f"{v['ram_bytes']:,}/{v['ram_budget']:,} B, load {v['load']:.1%} -> fits"
        )
    print(f"  report: {result.report_path}")
    return 0
