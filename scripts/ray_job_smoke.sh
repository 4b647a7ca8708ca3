#!/usr/bin/env bash
# The `ray job submit` path end to end on this machine (run by tests/train/test_ray_job.py, so CI runs it):
#   1. start a local Ray head (`ray start --head`, needs ray[default] for the job server);
#   2. submit a short training job with `ray job submit --working-dir . -- python -m train --config …`;
#   3. check the job succeeded and exported a policy; 4. stop the cluster (also on failure).
# Safe on a shared host: the cluster gets its own ports (PORT_BASE … +10, all configurable), its own temp dir, binds
# to 127.0.0.1, and is stopped by ending only the processes of that temp dir — never the CLI's stop command, which would
# end every Ray process of the user (other jobs, CI's).
# With --multinode it simulates a cluster on this machine: the head (1 CPU) plus two worker nodes joined with
# `ray start --address …` — a "GPU node" that offers the custom resource reasoner_node (1 CPU) and a CPU node (2
# CPUs) — and trains through one shared reasoner service (TrainConfig.reasoner_service with resources
# {reasoner_node: 1}) with 2 EnvRunners; it then checks from the run's summary that the replica ran on the
# reasoner node and no EnvRunner did.
# With --vllm (after --multinode) the job trains on real data instead — SmolLM2 on HotpotQA, the reasoner replica a
# vLLM engine (reasoner: vllm) that batches both EnvRunners' envs in its own scheduler.
# Usage: scripts/ray_job_smoke.sh [--multinode [--vllm]] [OUT_DIR]      (OUT_DIR default: runs/ray_job_smoke)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
# shellcheck disable=SC1091
source "$VENV/bin/activate"
MULTI=0
VLLM=0
if [ "${1:-}" = --multinode ]; then MULTI=1; shift; fi
if [ "${1:-}" = --vllm ]; then VLLM=1; shift; fi
OUT=$(realpath -m "${1:-runs/ray_job_smoke}")
BASE=${RAY_SMOKE_PORT_BASE:-26391}
PORT=${RAY_SMOKE_PORT:-$BASE}
DASH=${RAY_SMOKE_DASHBOARD_PORT:-$((BASE + 1))}
mkdir -p "$OUT"
# a short private temp dir (Ray's socket paths must stay under ~100 characters)
RAY_TMP=$(mktemp -d /tmp/kairos-ray.XXXXXX)
export RAY_TMPDIR="$RAY_TMP"
python - "$OUT" "$MULTI" "$VLLM" <<'PY'
import sys, yaml
out, multi, vllm = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
if vllm:  # SmolLM2 on HotpotQA through a vLLM replica: short chains, no warm start, no content PCA
    cfg = yaml.safe_load(open("configs/train_hotpotqa.yaml"))
    cfg["env_config"].update(reasoner="vllm", reasoner_options={"kv_cache_gib": 1}, split="dev[0:32:2]",
                             max_steps=2, max_step_tokens=16, signals=["pulse", "output", "rsus"])
    cfg["warmstart"]["enabled"] = False
    cfg["model"]["content_dim"] = 0
    cfg["algo"]["episodes_per_batch"] = 8
    envs_per_runner = 4
else:
    cfg = yaml.safe_load(open("configs/experiments/microworld/train_microworld.yaml"))
    cfg["algo"]["episodes_per_batch"] = 16
    cfg["env_config"].update(max_questions=32)
    cfg["warmstart"].update(questions=16, epochs=2)
    envs_per_runner = 8
cfg.update(name="ray_job_smoke", out_dir=f"{out}/run", iterations=2, checkpoint_every=1)
cfg["env_config"]["cache_path"] = f"{out}/cache.sqlite"
if multi:  # one replica on the reasoner node, two EnvRunners elsewhere
    cfg.update(num_env_runners=2, num_envs_per_env_runner=envs_per_runner,
               reasoner_service={"replicas": 1, "num_cpus": 1, "resources": {"reasoner_node": 1}})
yaml.safe_dump(cfg, open(f"{out}/train.yaml", "w"))
PY
# the job's working dir is an uploaded copy: point it at the shared data by an absolute path
SHARED=$(python -c "from envs.core.data.loaders import shared_data_dir; print(shared_data_dir())")
export RAY_ADDRESS="http://127.0.0.1:$DASH"
# token authentication (Ray >= 2.59 enables it for local clusters): the head and the CLI must agree, so set the
# mode explicitly and make sure a token exists (~/.ray/auth_token)
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}
if [ "$RAY_AUTH_MODE" = token ]; then ray get-auth-token --generate > /dev/null; fi
stop_own_cluster() {  # only the processes of this cluster: their command lines name its temp dir
  pkill -TERM -f -- "$RAY_TMP" 2> /dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do pgrep -f -- "$RAY_TMP" > /dev/null || break; sleep 1; done
  pkill -KILL -f -- "$RAY_TMP" 2> /dev/null || true
  rm -rf "$RAY_TMP"
}
trap stop_own_cluster EXIT
ray start --head --num-cpus 2 --node-ip-address 127.0.0.1 --temp-dir "$RAY_TMP" --port "$PORT" \
  --dashboard-host 127.0.0.1 --dashboard-port "$DASH" --include-dashboard true --disable-usage-stats \
  --node-manager-port $((BASE + 2)) --object-manager-port $((BASE + 3)) --ray-client-server-port $((BASE + 4)) \
  --dashboard-agent-listen-port $((BASE + 5)) --dashboard-agent-grpc-port $((BASE + 6)) \
  --metrics-export-port $((BASE + 7)) --runtime-env-agent-port $((BASE + 8)) \
  --min-worker-port $((BASE + 100)) --max-worker-port $((BASE + 199)) > "$OUT/ray_start.log" 2>&1
if [ "$MULTI" = 1 ]; then  # two more nodes on this machine, each with its own ports
  add_node() {  # add_node OFFSET NUM_CPUS RESOURCES_JSON
    local b=$((BASE + $1))
    # each node its own temp dir, as on separate machines: nodes sharing one unpack the job's working dir into the same
    # folder, and a later node's unpack (rmtree + extract) pulls it from under the processes already running in it
    mkdir -p "$RAY_TMP/n$1"
    ray start --address "127.0.0.1:$PORT" --num-cpus "$2" --resources "$3" --node-ip-address 127.0.0.1 \
      --temp-dir "$RAY_TMP/n$1" \
      --disable-usage-stats --node-manager-port $((b + 2)) --object-manager-port $((b + 3)) \
      --dashboard-agent-listen-port $((b + 5)) --dashboard-agent-grpc-port $((b + 6)) --metrics-export-port $((b + 7)) \
      --runtime-env-agent-port $((b + 8)) --min-worker-port $((b + 100)) --max-worker-port $((b + 199)) \
      >> "$OUT/ray_start.log" 2>&1
  }
  add_node 200 1 '{"reasoner_node": 1}'
  add_node 400 2 '{}'
fi
# runs/ and the virtual environment stay behind: the job runs the package from the uploaded working dir
ray job submit --working-dir . \
  --runtime-env-json "{\"excludes\": [\".venv\", \"runs\", \".git\", \"**/__pycache__\", \"*.sqlite\"], \"env_vars\": {\"KAIROS_SHARED_DATA\": \"$SHARED\"}}" \
  -- python -m train --config "$OUT/train.yaml" --no-progress 2>&1 | tee "$OUT/job.log"
test -f "$OUT/run/policy_trigger/spec.json" || { echo "ray_job_smoke: no exported policy in $OUT/run" >&2; exit 1; }
grep -q "Job 'raysubmit_.*' succeeded" "$OUT/job.log" || { echo "ray_job_smoke: job did not succeed" >&2; exit 1; }
if [ "$MULTI" = 1 ]; then  # the replica on the reasoner node, every EnvRunner elsewhere
  python - "$OUT/run/summary.json" <<'PY' || { echo "ray_job_smoke: wrong placement" >&2; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))["reasoner_service"]
(rep,) = s["replicas"]
assert rep["node_resources"].get("reasoner_node") == 1, rep["node_resources"]
assert len(s["env_runner_nodes"]) == 2 and rep["node_id"] not in s["env_runner_nodes"], s
assert rep["calls"] > 0 and rep["mean_batch"] >= 1, rep
batch = rep.get("engine_mean_batch", rep["mean_batch"])  # a vLLM replica: the batch its engine's scheduler ran
kind = "vLLM engine" if "engine_mean_batch" in rep else "replica"
print(f"placement: {kind} pid {rep['pid']} on the reasoner node, mean batch {batch:.1f} over "
      f"{rep['calls']} calls; EnvRunners on {len(set(s['env_runner_nodes']))} other node(s)")
PY
fi
echo "ray_job_smoke: OK ($OUT/run)"
