"""The ``qsa`` command line: one entry point, subcommands registered from qsa.commands.*.

Each command module exposes ``register(subparsers)`` that adds its parser and sets
``func=run``; modules import nothing heavy at top level (torch, numpy, runtimes are imported
inside ``run``) so ``qsa --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ._version import __version__

# Command modules, in the order they appear in --help.
COMMAND_MODULES = (
    "qsa.commands.info",
    "qsa.commands.pack",
    "qsa.commands.demo",
    "qsa.commands.lm",
    "qsa.commands.live",
    "qsa.commands.data",
    "qsa.commands.train",
    "qsa.commands.enhance",
    "qsa.commands.eval",
    "qsa.commands.export",
    "qsa.commands.compare",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qsa",
        description="Quaternion attention models from PyTorch training to phones and MCUs.",
    )
    parser.add_argument("--version", action="version", version=f"qsa {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from .errors import QsaError

    try:
        return int(args.func(args) or 0)
    except QsaError as e:
        print(f"qsa {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # a file-system failure on a named path (disk full, permission, a path that vanished
        # under us): say which path and why instead of a traceback; QSA_DEBUG=1 re-raises
        if e.filename is None or os.environ.get("QSA_DEBUG"):
            raise
        where = e.filename if e.filename2 is None else f"{e.filename} -> {e.filename2}"
        print(f"qsa {args.command}: error: {where}: {e.strerror or e}; check the path, its "
              "permissions and the free space (QSA_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"qsa {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
