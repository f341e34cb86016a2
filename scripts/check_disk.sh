#!/usr/bin/env bash
# Refuse to start the Python install when the disk cannot hold it: pip would otherwise stop
# half-way with "[Errno 28] No space left on device" and leave a broken venv behind.
# The venv (torch CPU, ExecuTorch, LiteRT, TFLite-Micro, onnxruntime, ...) takes about 3.1 GB;
# pip needs room to unpack wheels beside it.
set -euo pipefail
dir=${1:-.}
# an existing venv is only updated: room for unpacking is enough
if [ -x "$dir/bin/python" ]; then default_mb=1024; else default_mb=4500; fi
need_mb=${QSA_SETUP_NEED_MB:-$default_mb}
avail_mb=$(df -Pm "$dir" | awk 'NR==2 {print $4}')
tmp=${TMPDIR:-/tmp}
avail_tmp_mb=$(df -Pm "$tmp" | awk 'NR==2 {print $4}')
if [ "$avail_mb" -lt "$need_mb" ]; then
  echo "qsa setup: only ${avail_mb} MB free on the disk holding $(cd "$dir" && pwd)," \
       "the Python install needs about ${need_mb} MB (venv ~3.1 GB plus unpacking)." >&2
  echo "  fix: free space there (old clones, build folders, pip cache: 'pip cache purge')," \
       "or set VENV=/path/on/a/bigger/disk/venv" >&2
  exit 1
fi
if [ "$avail_tmp_mb" -lt 1024 ]; then
  echo "qsa setup: only ${avail_tmp_mb} MB free in ${tmp}; pip unpacks wheels there and" \
       "needs about 1024 MB. fix: free space there or set TMPDIR to a roomier folder" >&2
  exit 1
fi
