#!/usr/bin/env bash
# The two generation grids of issue 46, run as plain `attendout finetune` calls on one GPU, several runs at
# once (each run a process; small models leave the GPU mostly idle, so concurrency is what makes them fast).
#
#   bash experiments/gpu_generation_grid.sh DATA OUT [PARALLEL] [WHICH]
#
# DATA holds nltk_data/corpora/movie_reviews.zip and multi30k/; OUT receives OUT/runs/GRID/METHOD-seedS/
# (config.json, log.jsonl, results.json; no model weights) and OUT/done.txt (one line a finished run).
# WHICH: lm, mt or both (default). A run whose results.json exists is skipped: rerunning resumes the grid.
# The same recipes as experiments/synthesizer-lm.toml and experiments/multi30k.toml, which `attendout
# bench` runs on any machine.
set -uo pipefail
DATA=$1
OUT=$2
PARALLEL=${3:-10}
WHICH=${4:-both}
EXTRA=${EXTRA:-}  # appended to every run (a smoke test: EXTRA='--max-steps 3 --max-eval-samples 20')
SEEDS=${SEEDS:-"1 2 3 4 5"}
mkdir -p "$OUT/runs"
PY=${PYTHON:-python3}

LM_COMMON="--task movie-reviews-lm --data-dir $DATA/nltk_data --model-init scratch --model gpt2 --model-layers 2
  --model-hidden 128 --model-heads 4 --vocab-size 8000 --max-length 64 --batch-size 16 --learning-rate 1e-3
  --max-steps 600 --eval-steps 150 --eval-batch-size 128"
MT_COMMON="--task multi30k --data-dir $DATA/multi30k --model-init scratch --model t5 --model-layers 3
  --model-hidden 256 --model-heads 4 --vocab-size 8000 --max-length 64 --batch-size 64 --learning-rate 1e-3
  --epochs 5 --validation-split 0.03 --eval-batch-size 256"
LM_COMMON=$(echo $LM_COMMON)  # one line each (the job list is a line a run)
MT_COMMON=$(echo $MT_COMMON)
SYN="--method synthesizer --init paper --variant"
declare -A LM_METHODS=(
  [dot]="--method none"
  [random]="$SYN random" [random-fixed]="$SYN random --fixed" [factorized-random]="$SYN factorized-random"
  [dense]="$SYN dense" [factorized-dense]="$SYN factorized-dense"
  [random+dot]="$SYN random+dot" [dense+dot]="$SYN dense+dot"
)
declare -A MT_METHODS=(
  [none]="--method none"
  [dense]="$SYN dense" [random]="$SYN random" [factorized-dense]="$SYN factorized-dense"
  [dense+dot]="$SYN dense+dot" [random+dot]="$SYN random+dot"
  [attn-dropout]="--method attn-dropout" [scores-dropout]="--method scores-dropout" [drophead]="--method drophead"
)

jobs_file=$(mktemp)
for seed in $SEEDS; do  # seed-major: a grid stopped early has every method at the same seeds
  if [[ $WHICH != mt ]]; then
    for name in "${!LM_METHODS[@]}"; do
      echo "synthesizer-lm|$name|$seed|$LM_COMMON ${LM_METHODS[$name]}" >>"$jobs_file"
    done
  fi
  if [[ $WHICH != lm ]]; then
    for name in "${!MT_METHODS[@]}"; do
      echo "multi30k|$name|$seed|$MT_COMMON ${MT_METHODS[$name]}" >>"$jobs_file"
    done
  fi
done

run_one() {
  IFS='|' read -r grid name seed args <<<"$1"
  dir="$OUT/runs/$grid/$name-seed$seed"
  [[ -f $dir/results.json ]] && return 0
  mkdir -p "$dir"
  start=$(date +%s)
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 $PY -m attendout.cli finetune $args --seed "$seed" --output-dir "$dir" --overwrite \
    --no-save-model --no-progress ${EXTRA:-} >"$dir/stdout.txt" 2>&1
  rc=$?
  echo "$grid $name seed$seed rc=$rc $(($(date +%s) - start))s" >>"$OUT/done.txt"
}
export -f run_one
export OUT PY EXTRA
tr '\n' '\0' <"$jobs_file" | xargs -0 -P "$PARALLEL" -I{} bash -c 'run_one "$@"' _ {}
rm -f "$jobs_file"
