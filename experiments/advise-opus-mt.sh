#!/usr/bin/env bash
# advise where users will run it (issue 56, point 4): which attention regulariser for fine-tuning a
# pretrained OPUS-MT (opus-mt-en-fr, `make models`) on 1,000 Multi30k EN->FR pairs, the recipe of
# experiments/addrop-opus-mt.toml (AdamW lr 2e-5, batch 16, 3 epochs, greedy decoding of 64 new tokens).
#
#   bash experiments/advise-opus-mt.sh        # run it twice at once: the two jobs share the work
#
# A reduced design, for this 2-core CPU (a run is about 10 minutes of training and validation, plus 7 of
# decoding val and test_2016_flickr in the confirmation):
# - methods: attention dropout and AD-DROP (gradient attribution on the encoder, as the grid runs it;
#   p and q searched), not the other regularisers;
# - search: the grid sampler, 2 trials a method (attention dropout p 0.05 and 0.1; AD-DROP's first two
#   (p, q) points), each at search seeds 0 and 1000 against plain fine-tuning at the same seeds, on the
#   290 pairs carved from train (1%): 10 runs;
# - confirmation: 3 fresh seeds, not 5 (9 runs), scored on val; the answer says how many seeds would
#   answer if 3 cannot.
# Unlike the grid (model_selection "last"), advise keeps each run's best validation epoch (its recipe for
# every task): the answer is for fine-tuning with that early stopping.
# About 5 CPU hours in all. Resumable: rerun the same line after a stop.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${ATTENDOUT_DATA:-../shared/data}"
exec .venv/bin/attendout advise --task multi30k-en-fr --data-dir "$DATA/multi30k" --model opus-mt-en-fr \
  --max-train-samples 1000 --batch-size 16 --learning-rate 2e-5 --weight-decay 0.01 --warmup-ratio 0.0 \
  --max-length 128 --max-new-tokens 64 --validation-split 0.01 --eval-batch-size 16 --epochs 3 \
  --methods attn-dropout,addrop --method-option addrop.layers=encoder --method-option addrop.attribution=ga \
  --sampler grid --trials 2 --search-repeats 2 --seeds 3 \
  --output-dir results/advise/opus-mt-en-fr --threads 1 --no-progress "$@"
