#!/usr/bin/env bash
# Issue 20's recipe variants over 3 seeds on condition (a) (configs/bench_microworld_variants.yaml): trains the
# main recipe's seeds 1-2 and MiniLM content's seeds 1-2 (seed 0 of each: the quickstart's run and
# configs/train_microworld_minilm.yaml's own out_dir), then the benchmark. Reruns skip finished runs and rows.
#   scripts/bench_microworld_variants.sh        (≈ 45 min on 2 CPUs with the trajectory caches warm)
source "$(dirname "$0")/lib_runs.sh"
for s in 1 2; do
  train configs/train_microworld.yaml "$s" "runs/train/microworld_s$s"
  train configs/train_microworld_minilm.yaml "$s" "runs/train/microworld_minilm_s$s"
done
"$PY" -m eval bench policies --config configs/bench_microworld_variants.yaml
