#!/usr/bin/env bash
# Issue 20's real-data condition: the main recipe (counterfactual warm start -> REINFORCE, content + signals) and its
# signals-only ablation on SmolLM2-135M-Instruct / HotpotQA with at most one retrieval per question, 3 seeds each,
# trained on the even-indexed questions of the shared dev 500, benchmarked on the odd-indexed ones against every
# fixed trigger calibrated on dev (threshold x query mode) and the cache oracle of the same one-retrieval tree.
# The first run's warm start labels every decision of the 250 training questions counterfactually (live SmolLM2
# generation); every later run, and REINFORCE itself, replays those episodes from the shared trajectory cache.
# Reruns skip finished runs and finished benchmark rows.
#   scripts/bench_hotpotqa_condition.sh
source "$(dirname "$0")/lib_runs.sh"
for s in 0 1 2; do
  train configs/train_hotpotqa.yaml "$s" "runs/train/hotpotqa_s$s"
  train configs/experiments/real_data/train_hotpotqa_signals_only.yaml "$s" "runs/train/hotpotqa_signals_only_s$s"
done
"$PY" -m eval bench policies --config configs/bench_hotpotqa_learned.yaml
