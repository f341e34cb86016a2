"""``qsa live``: hear a model enhance the microphone in real time (or a file played as one).

Examples::

    qsa live -l                                    # list audio devices
    qsa live --model qcgan-35k --precision int8    # LiteRT (--runtime auto), int8 network
    qsa live --input-file noisy.wav --record out.wav --json-stats
    qsa live --virtual-mic                         # a denoised microphone for call apps
"""

from __future__ import annotations

import argparse


def int_or_str(text: str):
    """Device argument: a device number or (part of) a device name, as sounddevice takes."""
    try:
        return int(text)
    except ValueError:
        return text


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "live",
        help="enhance the microphone live (input and output audio streams, terminal view)",
        description=(
            "Enhance the microphone (or --input-file played as one) in real time and play the "
            "result; b toggles bypass, up/down arrows change --atten-lim in 3 dB steps, q, "
            "Ctrl-C or SIGTERM stops. Devices sample rates other "
            "than the model's 16 kHz are resampled (soxr) in the stream."
        ),
    )
    p.add_argument("-l", "--list-devices", action="store_true", help="list audio devices, exit")
    p.add_argument(
        "--model",
        default="qcgan-35k",
        help="shipped model name, .qsa file, exported .onnx/.pte/.tflite, 'reference-lowpass' "
        "or 'passthrough' (default: %(default)s)",
    )
    p.add_argument(
        "--runtime",
        default="auto",
        choices=("auto", "tflm", "litert", "executorch", "onnx", "torch"),
        help="engine that runs the streaming step. auto (default): LiteRT if ai-edge-litert "
        "is installed, else ONNX Runtime, else torch; the model is exported once into a "
        "cache (the first start takes that long), later starts load it in under a second "
        "without torch, and a hop takes about a tenth of eager torch's time (docs/live.md). "
        "torch: eager PyTorch, no export",
    )
    p.add_argument("--precision", default="fp32", choices=("int8", "fp32"))
    p.add_argument("-i", "--input-device", type=int_or_str, help="input device (number or name)")
    p.add_argument("-o", "--output-device", type=int_or_str, help="output device (number/name)")
    p.add_argument(
        "--samplerate",
        type=int,
        help="device sample rate (default: 16000 if the " "devices take it, else their default)",
    )
    p.add_argument(
        "--channels",
        type=int,
        choices=(1, 2),
        help="device channels (default: 1 " "if accepted, else 2)",
    )
    p.add_argument("--block-ms", type=float, default=10.0, help="audio block (default: 10 ms)")
    p.add_argument(
        "--latency",
        default="high",
        help="PortAudio suggested latency: low, high or seconds (default: high, robust on "
        "PulseAudio and busy machines; low on a direct ALSA device for the least delay)",
    )
    p.add_argument(
        "--jitter-ms",
        type=float,
        metavar="MS",
        help="output buffered ahead against host scheduling jitter (default: one block). A "
        "host that stalls callbacks for G ms and then catches up in a burst underruns unless "
        "this covers G; it adds MS to the latency. On a host that calls back several blocks "
        "at a time (PulseAudio: two), the jitter buffer scales it to that burst after the "
        "first second (docs/live.md)",
    )
    p.add_argument(
        "--resample-quality",
        default="HQ",
        choices=("QQ", "LQ", "MQ", "HQ", "VHQ"),
        help="soxr quality when resampling (QQ: least latency; default: HQ)",
    )
    p.add_argument(
        "--record",
        metavar="OUT.wav",
        help="write input and enhanced output (and, with --input-file, the device "
        "microphone) as a float WAV at the model rate",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing --record file")
    p.add_argument("--input-file", metavar="IN.wav", help="play this file as the microphone")
    p.add_argument("--bypass", action="store_true", help="start in bypass (input passes through)")
    p.add_argument(
        "--atten-lim",
        metavar="DB",
        help="strength: the most the output may lie below the input, in dB (0 = the input "
        "unchanged, 12 = noise down by at most 12 dB); up/down arrows (or +/-) change it in "
        "3 dB steps while running. Default: none (no limit, the model's full strength)",
    )
    p.add_argument(
        "--virtual-mic",
        nargs="?",
        const="qsa_mic",
        metavar="NAME",
        help="PulseAudio / PipeWire: create a virtual microphone NAME (default: qsa_mic, "
        "listed as 'qsa denoised microphone') and write the enhanced stream into it instead "
        "of a speaker; call applications pick it as their microphone. Removed on exit "
        "(docs/live.md)",
    )
    p.add_argument("--json-stats", action="store_true", help="print statistics as JSON lines")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.set_defaults(func=run)


def _latency(text: str):
    if text in ("low", "high"):
        return text
    try:
        return float(text)
    except ValueError:
        from qsa.errors import ConfigError

        raise ConfigError(f"--latency {text!r}; expected low, high or seconds") from None


def _jitter(ms: float | None, block_ms: float) -> dict:
    if ms is None:
        return {}
    if not 0 <= ms <= 1000:
        from qsa.errors import ConfigError

        raise ConfigError(f"--jitter-ms {ms:g}; expected 0 to 1000 ms (one block is typical)")
    return {"margin_blocks": ms / block_ms}


def run(args: argparse.Namespace) -> int:
    from qsa.enhancement import check_atten_lim

    check_atten_lim(getattr(args, "atten_lim", None), "--atten-lim")  # before anything opens
    from qsa.apps.live import list_devices

    if args.list_devices:
        print(list_devices())
        from qsa.apps.live.virtual import describe_virtual_mics

        print(describe_virtual_mics())
        return 0
    vmic = None
    if args.virtual_mic is not None:  # before the model loads: applications see it at once
        from qsa.apps.live.virtual import start_for_live

        vmic = start_for_live(args)
    try:
        return _run(args, vmic)
    finally:
        if vmic is not None:  # after the stream is closed
            vmic.close()


def _run(args: argparse.Namespace, vmic) -> int:
    import sys

    from qsa.apps.live import LiveOptions, LiveSession, load_processor, run_session
    from qsa.errors import AudioError, QsaError

    opts = LiveOptions(
        input_device=args.input_device,
        output_device=args.output_device,
        samplerate=args.samplerate,
        block_ms=args.block_ms,
        channels=args.channels,
        input_file=args.input_file,
        record=args.record,
        bypass=args.bypass,
        duration=args.duration,
        resample_quality=args.resample_quality,
        latency=_latency(args.latency),
        force=args.force,
        **_jitter(args.jitter_ms, args.block_ms),
    )
    from qsa.apps.live.processors import AttenLimited
    from qsa.enhancement import check_atten_lim

    atten_lim = check_atten_lim(getattr(args, "atten_lim", None), "--atten-lim")
    # always wrapped, so that the terminal view's keys can set a limit later
    processor = AttenLimited(load_processor(args.model, args.runtime, args.precision), atten_lim)
    # The callback needs the GIL promptly: let the worker thread give it up every 0.5 ms.
    sys.setswitchinterval(0.0005)
    session = LiveSession(processor, opts).open()
    if vmic is not None:  # the sink or the server gone: stop with that error
        vmic.watch(lambda why: setattr(session, "error", AudioError(why)))
    try:
        final = run_session(session, json_stats=args.json_stats)
    except QsaError as e:
        if session.stream_stuck:
            print(f"qsa live: error: {e}", file=sys.stderr)
            _exit_without_audio_library(2)
        raise
    if not args.json_stats:
        x = final["latency_ms"]
        print(
            f"qsa live: {final['t']:.1f} s, {final['hops']} hops, hop p99 "
            f"{final['hop_ms_p99']:.3f} ms, latency {x['end_to_end']:.1f} ms, over/underruns "
            f"{final['overruns']}/{final['underruns']}"
            + (f", recorded {args.record}" if args.record else ""),
            file=sys.stderr,
        )
    if session.stream_stuck:
        _exit_without_audio_library(0)
    return 0


def _exit_without_audio_library(code: int) -> None:
    """Everything is saved, but the audio device did not close: PortAudio's exit handler
    would block on it too, so leave without running it."""
    import os
    import sys

    print("qsa live: the audio device did not close within 3 s; exiting without waiting for "
          "it", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
