#!/usr/bin/env bash
# The learned-vs-fixed comparison on both micro-world conditions, 3 seeds each (issue: a learned policy that beats
# every fixed trigger). Per condition — (a) the default world's held-out questions, (b) the fact-disjoint split —
# trains the main recipe and its signals-only ablation × seeds 0-2, then benchmarks the condition. Reruns skip
# finished runs (each run's warm-start labels come from the shared trajectory cache after the first seed) and
# finished benchmark rows.
#   scripts/bench_microworld_conditions.sh [a|b|all]      (b: 53 min on 2 CPUs from a cold cache; all ≈ 2 × that)
source "$(dirname "$0")/lib_runs.sh"
which=${1:-all}
case "$which" in a|b|all) ;; *) echo "usage: $0 [a|b|all]" >&2; exit 2;; esac
condition() {  # main-recipe config, signals-only config, run-name prefix, bench config
  for s in 0 1 2; do
    train "$1" "$s" "runs/train/${3}_s$s"
    train "$2" "$s" "runs/train/${3}_signals_only_s$s"
  done
  "$PY" -m eval bench policies --config "$4"
}
if [ "$which" != b ]; then
  condition configs/train_microworld.yaml configs/train_microworld_signals_only.yaml microworld \
    configs/bench_microworld_seeds.yaml
fi
if [ "$which" != a ]; then
  condition configs/train_microworld_factdisjoint.yaml configs/train_microworld_factdisjoint_signals_only.yaml \
    microworld_fd configs/bench_microworld_factdisjoint.yaml
fi
