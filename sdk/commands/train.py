"""`qsa train MODEL --data SPEC`: MetricGAN training of a QC-GAN enhancer."""

from __future__ import annotations


def register(sub) -> None:
    from .threads import thread_count

    p = sub.add_parser("train", help="train a QC-GAN speech enhancer (MetricGAN)",
                       description="Runs data-parallel under torchrun --nproc-per-node N.")
    p.add_argument("model", help="model preset, e.g. qcgan-35k, qcgan-0.89m")
    p.add_argument("--data", required=True,
                   help="synth:DIR | real:DIR | voicebank:DIR | dns:DIR (paired train/val "
                        "sets); several joined by '+' train on all of them, items "
                        "alternating (real:data/real+synth:data/synth)")
    p.add_argument("--out", default=None, help="run folder (default runs/MODEL)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no cap)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--segment", type=float, default=2.0, help="crop length in seconds")
    p.add_argument("--lr", type=float, default=1e-3, help="generator learning rate")
    p.add_argument("--lr-d", type=float, default=5e-4, help="discriminator learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pesq-workers", type=int, default=2)
    p.add_argument("--no-metric-gan", action="store_true",
                   help="train with the reconstruction losses only (no discriminator)")
    p.add_argument("--metric-start", type=int, default=0,
                   help="global step from which the MetricGAN loss is used")
    p.add_argument("--d-warmup", type=int, default=0,
                   help="first N steps train only the discriminator, the generator fixed "
                        "(a fresh critic when fine-tuning with --init MODEL)")
    p.add_argument("--val-items", type=int, default=32)
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument("--threads", type=thread_count, default=0,
                   help="torch threads (0: default)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="auto: CUDA when available (each torchrun rank on its LOCAL_RANK GPU)")
    p.add_argument("--init", default="",
                   help="start from these weights (fine-tuning): a packed model file or a "
                        "shipped model name (the generator), or a run's checkpoint / run "
                        "folder (generator and discriminator; new optimisers and schedule)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    p.add_argument("--force", action="store_true", help="start over in an existing OUT")
    p.add_argument("--mag-weight", type=float, default=0.9,
                   help="weight of the compressed-magnitude MSE, the main regression term "
                   "(default 0.9, CMGAN's)")
    p.add_argument("--complex-weight", type=float, default=0.1,
                   help="weight of the compressed complex-spectrum MSE (default 0.1, CMGAN's)")
    p.add_argument("--stoi-weight", type=float, default=0.0,
                   help="weight of the differentiable STOI loss, 1 - STOI (0: off)")
    p.add_argument("--sisdr-weight", type=float, default=0.0,
                   help="weight of the -SI-SDR / 10 dB loss (0: off)")
    p.add_argument("--band-limit", type=float, default=0.0, metavar="P",
                   help="share of training crops (noisy and clean alike) band-limited as a "
                   "capture chain does: a 44.1/48 kHz resampling round trip or a 5.5-7.8 kHz "
                   "low-pass (default 0: off)")
    p.add_argument("--clean-share", type=float, default=0.0, metavar="P",
                   help="share of training crops served without their noise (clean speech in, "
                   "the same speech as the target), so the model keeps clean speech's level "
                   "and spectrum (default 0: off)")
    p.add_argument("--pesq-weight", type=float, default=0.0,
                   help="weight of the differentiable PESQ-WB proxy loss, 1 - (PESQ - 1) / 3.5 "
                        "(qsa.models.pesq_loss; 0: off)")
    p.add_argument("--balance-weight", type=float, default=0.0,
                   help="weight of the spectral-balance loss: the squared band energy of the "
                        "output over the clean target's, in 10 dB units, 200 Hz-7 kHz (0: off;"
                        " keeps a PESQ-driven fine-tune from muffling the speech)")
    p.add_argument("--distill-weight", type=float, default=0.0,
                   help="weight of a distillation term: compressed magnitude + complex MSE "
                        "against a teacher's output for each training item (written first by "
                        "`python scripts/make_teacher.py CORPUS`, into CORPUS/train/teacher/; "
                        "items without one skip the term; 0: off)")
    p.add_argument("--max-balance-db", type=float, default=0.0, metavar="DB",
                   help="MODEL.best.qsa keeps no epoch whose validation output leaves +-DB "
                        "per band against the clean speech (0: no gate; 6 as the tests)")
    p.add_argument("--select", default="pesq", choices=("pesq", "pesq+stoi"),
                   help="which validation epoch MODEL.best.qsa keeps: the best PESQ-WB, or "
                        "the best (PESQ-WB - 1) / 3.5 + STOI")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="model_set",
                   help="change a field of the preset's config (repeatable), e.g. --set "
                        "window=64 or --set enc_channels=8,8,16; saved with the weights. "
                        "With --init only fields that keep every weight's shape, or "
                        "df_taps=K (deep filtering: the new taps start at zero)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from qsa.errors import QsaError
    from qsa.train.se import TrainConfig, train_from_config

    out = args.out or f"runs/{args.model}"
    cfg = TrainConfig(
        model=args.model, data=args.data, out=out, epochs=args.epochs, max_steps=args.max_steps,
        batch_size=args.batch_size, segment_seconds=args.segment, lr_g=args.lr, lr_d=args.lr_d,
        seed=args.seed, pesq_workers=args.pesq_workers, metric_gan=not args.no_metric_gan,
        metric_start=args.metric_start, d_warmup=args.d_warmup,
        val_items=args.val_items, ckpt_every=args.ckpt_every,
        threads=args.threads, init=args.init, device=args.device,
        mag_weight=args.mag_weight, complex_weight=args.complex_weight,
        stoi_weight=args.stoi_weight, sisdr_weight=args.sisdr_weight,
        pesq_weight=args.pesq_weight, select=args.select,
        balance_weight=args.balance_weight, max_balance_db=args.max_balance_db,
        distill_weight=args.distill_weight,
        band_limit=args.band_limit, clean_share=args.clean_share,
        model_set=tuple(args.model_set),
    )
    from qsa.train.se import model_config

    model_config(cfg)  # a bad --set fails here, before any folder is made
    from pathlib import Path

    ck = Path(out) / "checkpoint.safetensors"
    if ck.exists() and not (args.resume or args.force):
        raise QsaError(f"{out} already holds a run; pass --resume to continue it or --force "
                       "to start over")
    from qsa.fileio import ensure_dir

    ensure_dir(out, "--out folder")  # before any data is read or a step is run
    result = train_from_config(cfg, resume=args.resume, progress=not args.no_progress)
    if result.get("files"):
        for f in result["files"]:
            print(f"wrote {f}")
    return 0
