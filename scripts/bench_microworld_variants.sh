#!/usr/bin/env bash
# Issue 20's recipe variants over 3 seeds on condition (a) (configs/experiments/microworld/bench_microworld_variants.yaml): trains what is
# missing — the main recipe's seeds 0-2 (seed 0 reproduces the quickstart's run), the QueryGen head's seeds 0-2,
# MiniLM content's seeds 0-2 and the whole split (seed 0) — then the benchmark. Reruns skip finished runs and rows.
#   scripts/bench_microworld_variants.sh [main|querygen|minilm|whole ...]   (default: all four)
#   ≈ 7 min per run with the trajectory caches warm (the whole split ≈ 21 min), then the benchmark
source "$(dirname "$0")/lib_runs.sh"
parts=${*:-main querygen minilm whole}
for p in $parts; do
  case "$p" in
    main) for s in 0 1 2; do train configs/experiments/microworld/train_microworld.yaml "$s" "runs/train/microworld_s$s"; done;;
    querygen) for s in 0 1 2; do train configs/experiments/microworld/train_microworld_querygen_head.yaml "$s" "runs/train/microworld_querygen_head_s$s"; done;;
    minilm) train configs/experiments/microworld/train_microworld_minilm.yaml 0 runs/train/microworld_minilm
            for s in 1 2; do train configs/experiments/microworld/train_microworld_minilm.yaml "$s" "runs/train/microworld_minilm_s$s"; done;;
    whole) train configs/experiments/microworld/train_microworld_whole_split.yaml 0 runs/train/microworld_whole;;
    *) echo "usage: $0 [main|querygen|minilm|whole ...]" >&2; exit 2;;
  esac
done
"$PY" -m eval bench policies --config configs/experiments/microworld/bench_microworld_variants.yaml
