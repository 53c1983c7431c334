#!/usr/bin/env bash
# Quickstart on a fresh machine: a virtual environment, torch 2.13.0 (the CPU wheel where pip's
# index has it: see the README's Quickstart), mdindex itself, then an index of the example corpus
# in out/example (no GPU, no network after the installs).
#   bash examples/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q torch==2.13.0
pip install -q -e .
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_AUTH_MODE=disabled
mdindex build --config configs/local.yaml --input examples/corpus --output out/example
