#!/usr/bin/env bash
# Run the replication studies (CPU scale) one after another with 2 workers, then render each
# study's reports into $REPORTS/<study>/ (default reports/; NO_REPORTS=1 skips them) and its export
# into $REPORTS/<study>/data/ (`ablate report --data` renders from it, with no store).
# Resumable: re-running skips finished trials. About 3.5 hours on 2 cores (README: the replications).
# With local changes it trains from a clean worktree of HEAD (ALLOW_DIRTY=1: from the checkout).
# The stores are $ABLATE_HOME (default .ablate/); each study's wall time is appended to $WALL_LOG.
#   ABLATE_HOME=/work/replications/.ablate ABLATE_CACHE_DIR=/work/replications/cache \
#     WALL_LOG=/work/replications/logs/wall.txt NO_REPORTS=1 scripts/replicate.sh [study ...]
set -uo pipefail
cd "$(dirname "$0")/.."
main=$PWD
ablate=${ABLATE:-$main/.venv/bin/ablate}
reports=${REPORTS:-reports}
case $reports in /*) ;; *) reports=$main/$reports ;; esac
# Train from the commit, not from whatever the checkout holds while these hours run: with local
# changes, a detached worktree of HEAD is put first on the import path (and its studies read), so
# every trial's provenance names a commit anyone can check out (no "+dirty").
src=.
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && [ -z "${ALLOW_DIRTY:-}" ]; then
  src=$(mktemp -d "${TMPDIR:-/tmp}/ablate-replicate.XXXXXX")
  git worktree add -q --detach "$src" HEAD || { echo "cannot make a worktree of HEAD in $src"; exit 1; }
  trap 'git -C "$main" worktree remove --force "$src"' EXIT
  export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
  # Workers start as `python -m ablate.cli`, which imports from the working directory first: run
  # there, with the stores and logs still in this checkout.
  ABLATE_HOME=${ABLATE_HOME:-.ablate}
  case $ABLATE_HOME in /*) ;; *) ABLATE_HOME=$main/$ABLATE_HOME ;; esac
  export ABLATE_HOME
  case ${WALL_LOG:-} in ""|/*) ;; *) WALL_LOG=$main/$WALL_LOG ;; esac
  cd "$src" || exit 1
  echo "local changes: training from a clean worktree of $(git rev-parse --short HEAD) ($src)"
fi
default=(minrnn_selective_copy rotation_heads rotrnn_norm_stability rotrnn_vs_lru_tokens lru_ablations)
[ $# -gt 0 ] && studies=("$@") || studies=("${default[@]}")
for s in "${studies[@]}"; do
  start=$(date +%s)
  "$ablate" run "$src/studies/$s.yaml" --workers 2 --checkpoint-every 500 || echo "$s: ablate run exited $?"
  echo "$s: $(( $(date +%s) - start )) s wall ($(date -u +%FT%TZ))" | tee -a "${WALL_LOG:-/dev/null}"
  if [ -z "${NO_REPORTS:-}" ]; then
    "$ablate" report "$s" --out "$reports/$s" || echo "$s: ablate report exited $?"
    # What the reports are computed from, beside them: the next re-render needs no store.
    "$ablate" export "$s" "$reports/$s/data" || echo "$s: ablate export exited $?"
  fi
done
