#!/usr/bin/env bash
# Run the four replication studies (CPU scale) and render their reports into reports/<study>/.
# Resumable: re-running skips finished trials. About 40 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
studies=(${@:-rotrnn_norm_stability rotation_heads minrnn_selective_copy lru_ablations})
for s in "${studies[@]}"; do
  .venv/bin/ablate run "studies/$s.yaml" --workers 2 --checkpoint-every 0
  .venv/bin/ablate report "$s" --out "reports/$s"
done
