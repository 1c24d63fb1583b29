#!/usr/bin/env bash
# Tuned vs default (issue 39): `attendout advise` on CoLA-500 and SST-2-500 with the regime grid's recipe
# (experiments/regime.toml). The regime stage reads the regime probe's plain run (12 epochs; the rule of
# attendout.advise.regime gives the grid's 7 epochs for both); confirmation seeds 1-5, search seed 0, so the
# regime grid's `none` cells (same configuration, seeds 1-5) are reused instead of retrained.
#
#   ATTENDOUT_DATA=../shared/data bash experiments/advise.sh cola-500     # run it twice at once: the two
#   ATTENDOUT_DATA=../shared/data bash experiments/advise.sh cola-500     # jobs share trials and runs
#
# results/advise/cola-500 and sst2-500 were made by v0.4's search (one seed a trial, the validation score the
# objective); today's search (2 seeds a trial against plain fine-tuning) is another study, so a rerun needs
# another --output-dir (the reduced rerun: --methods attn-dropout,drophead --trials 4 --output-dir
# results/advise/cola-500-paired). Resumable: rerun the same line after a stop. Model: the packaged MiniLM (not BERT-base); CPU, 1 thread a job.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${ATTENDOUT_DATA:-../shared/data}"
case "${1:?usage: advise.sh cola-500|sst2-500 [extra advise flags]}" in
  cola-500) task=cola; split=0.06 ;;
  sst2-500) task=sst2; split=0.0075 ;;
  *) echo "unknown task id $1 (cola-500 or sst2-500)" >&2; exit 2 ;;
esac
id=$1; shift
exec .venv/bin/attendout advise --task "$task" --model minilm --data-dir "$DATA" \
  --max-train-samples 500 --validation-split "$split" --batch-size 16 --learning-rate 1e-4 \
  --weight-decay 0.01 --warmup-ratio 0.1 --max-length 64 --log-steps 8 \
  --regime-run "results/regime-probe/minilm/$id/none/seed-1" \
  --trials 6 --seeds 5 --reuse-runs results/regime \
  --output-dir "results/advise/$id" --threads 1 --no-progress "$@"
