# Shared by the condition scripts (source it): the Python to use and one resumable training run per call.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[1]}")/.."
PY=${PY:-.venv/bin/python}
train() {  # config seed out_dir: skipped when finished, resumed from its newest checkpoint otherwise
  if [ -f "$3/policy_trigger/spec.json" ]; then echo "skip $3 (done)"; return; fi
  "$PY" -m train --config "$1" --seed "$2" --out-dir "$3" --no-progress --resume
}
