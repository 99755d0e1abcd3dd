#!/usr/bin/env bash
# Set up ablate on a fresh Debian machine: system packages, a venv with CPU torch, the package.
# Idempotent: re-running skips what is there. GPU users: install your torch build first and
# run with ABLATE_TORCH=skip.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-venv: Debian's python3 has no ensurepip without it, and `python3 -m venv` fails.
apt_packages=(python3-venv poppler-utils fonts-dejavu-core dataset-fashion-mnist espeak-ng postgresql slurm-wlm munge)
missing=()
for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch 2.13.0. A version alone does not choose the build: PyPI's Linux wheel is the CUDA one (GBs).
# Where pip's index serves the CPU wheel (as this project's machines' pip configuration does), this
# takes it; elsewhere set ABLATE_TORCH_INDEX=https://download.pytorch.org/whl/cpu for the CPU build.
if [ "${ABLATE_TORCH:-}" != "skip" ]; then
  .venv/bin/pip install -q ${ABLATE_TORCH_INDEX:+--index-url "$ABLATE_TORCH_INDEX"} "torch==2.13.0"
fi
.venv/bin/pip install -q -e ".[dev]"
.venv/bin/pip install -q -e examples/ablate-cayley  # the plug-in example (docs/plugins.md), used by the tests
# The reports use the DejaVu files matplotlib ships, by file (ablate/report/fonts.py), never the
# host's fonts: check they came with it. (fonts-dejavu-core above only serves other programs.)
.venv/bin/python -c "from ablate.report import fonts; missing = [str(f) for f in fonts.files() if not f.is_file()]; assert not missing, f'report fonts missing: {missing}'"
echo "ablate is set up: .venv/bin/ablate --help"
