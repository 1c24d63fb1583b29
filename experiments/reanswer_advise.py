"""The answer stage of today's advise, applied to a finished study's confirmation (no training).

Reads OUTPUT/confirm.toml, the confirmation runs in OUTPUT/confirm/ and the chosen settings in
OUTPUT/advice.json, and prints the sentence advise now gives for them (chance, a design that cannot detect
--detect with the seeds that would, or the verdict), with the noise it is computed from; ``--write``
also stores it as OUTPUT/answer-now.md. The search is not rerun: see docs/results/advise.md (issue 47)
for why the v0.4 studies of CoLA-500 and SST-2-500 were re-answered this way.

    python experiments/reanswer_advise.py results/advise/cola-500 [--detect 0.02] [--write]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attendout.advise.answer import verdict
from attendout.advise.confirm import read_confirmation
from attendout.advise.power import seeds_range
from attendout.advise.scales import default_detect, describe_amount, in_metric_units
from attendout.bench.parse import load_experiment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="an advise --output-dir with a finished confirmation")
    parser.add_argument(
        "--detect", type=float, default=None, help="the smallest gain cared about (default: 2 points)"
    )
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--write", action="store_true", help="write STUDY/answer-now.md")
    args = parser.parse_args()
    out = Path(args.study)
    advice = json.loads((out / "advice.json").read_text())
    tuned = {m: s["options"] for m, s in advice["search"].items() if s["options"]}
    confirmation = read_confirmation(
        load_experiment(out / "confirm.toml"), out / "confirm", tuned, args.alpha
    )
    if not confirmation.rows:
        raise SystemExit(
            f"{out}: no method's confirmation runs are read as today's configuration (the cells are stale: a default "
            f"changed since they ran; `attendout table {out / 'confirm.toml'} --results {out / 'confirm'}` lists them), "
            "so today's answer stage has nothing to answer from"
        )
    detect = args.detect if args.detect is not None else default_detect(confirmation.metric)
    v = verdict(confirmation, args.alpha, detect=detect)
    noise, metric = confirmation.noise, confirmation.metric
    family = len(confirmation.rows)
    base = confirmation.rows[0].baseline_mean
    needs = {}
    for p in (
        1,
        2,
    ):  # half of --detect and --detect, as differences of the metric's values (relative: a share)
        low, high = seeds_range(noise, in_metric_units(metric, p * detect / 2, base), args.alpha, family)
        needs[p] = f"{low or 'more than 200'} to {high or 'more than 200'}"
    lines = [
        f"# {out}: the answer of today's advise stage on this study's confirmation",
        "",
        f"**{v.sentence}**",
        "",
        f"- As first answered (advice.json): {advice['sentence']}",
        f"- Plain fine-tuning on {confirmation.split}: {confirmation.rows[0].baseline_mean:.4f} "
        f"{confirmation.metric}; the chance floor ({confirmation.floor_constant}): {confirmation.floor}",
        f"- One seed's paired difference, pooled over the {family} methods: sd {noise.sd:.4f} ({noise.df:.3g} "
        f"degrees of freedom; {100 * confirmation.confidence:.0f}% upper bound {noise.upper(confirmation.confidence):.4f}); "
        f"detectable at {len(confirmation.seeds)} seeds (80% power at the bound, Holm over {family}): "
        f"{confirmation.detectable:.4f}",
        f"- Seeds that would detect {describe_amount(metric, detect / 2)} and {describe_amount(metric, detect)} "
        f"(over the noise's 80% interval): {needs[1]} and {needs[2]}",
        "",
        f"`python experiments/reanswer_advise.py {out}{' --detect ' + str(args.detect) if args.detect else ''}`",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        (out / "answer-now.md").write_text(text)


if __name__ == "__main__":
    main()
