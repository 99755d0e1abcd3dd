#!/usr/bin/env bash
# Run the replication studies (CPU scale) one after another with 2 workers, then render each
# study's reports into $REPORTS/<study>/ (default reports/; NO_REPORTS=1 skips them) and its export
# into $REPORTS/<study>/data/ (`ablate report --data` renders from it, with no store).
# Resumable: re-running skips finished trials. About 3.5 hours on 2 cores (README: the replications).
# The stores are $ABLATE_HOME (default .ablate/); each study's wall time is appended to $WALL_LOG.
#   ABLATE_HOME=/work/replications/.ablate ABLATE_CACHE_DIR=/work/replications/cache \
#     WALL_LOG=/work/replications/logs/wall.txt NO_REPORTS=1 scripts/replicate.sh [study ...]
set -uo pipefail
cd "$(dirname "$0")/.."
ablate=${ABLATE:-.venv/bin/ablate}
reports=${REPORTS:-reports}
default=(minrnn_selective_copy rotation_heads rotrnn_norm_stability rotrnn_vs_lru_tokens lru_ablations)
[ $# -gt 0 ] && studies=("$@") || studies=("${default[@]}")
for s in "${studies[@]}"; do
  start=$(date +%s)
  "$ablate" run "studies/$s.yaml" --workers 2 --checkpoint-every 500 || echo "$s: ablate run exited $?"
  echo "$s: $(( $(date +%s) - start )) s wall ($(date -u +%FT%TZ))" | tee -a "${WALL_LOG:-/dev/null}"
  if [ -z "${NO_REPORTS:-}" ]; then
    "$ablate" report "$s" --out "$reports/$s" || echo "$s: ablate report exited $?"
    # What the reports are computed from, beside them: the next re-render needs no store.
    "$ablate" export "$s" "$reports/$s/data" || echo "$s: ablate export exited $?"
  fi
done
