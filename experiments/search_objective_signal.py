"""How much signal can advise's search objective have? Measured on the regime grid's finished runs.

For each task of a results root (default: results/regime, the offline MiniLM, methods at their defaults
against plain fine-tuning, 5 seeds each) it prints, from the runs' results.json alone (no training):

* the standard deviation over seeds of one run's validation score (the v0.4 objective's noise) and of
  its paired difference to plain fine-tuning at the same seed (the ``delta`` objective's), medians over
  the methods, and the same on the evaluation split;
* the median correlation over seeds of a method's and plain fine-tuning's validation scores: what the
  pairing can cancel;
* how well each candidate objective predicts the evaluation split's paired difference: Spearman's rho
  over every (method, seed) run, and over the methods' means, for the validation metric's difference
  and for the validation loss's (negated: a lower loss should mean a higher score).

    python experiments/search_objective_signal.py [RESULTS_ROOT] [--out results/search-objective/signal.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from scipy import stats


def runs_of(task_dir: Path) -> dict[tuple[str, int], dict]:
    runs = {}
    for path in sorted(task_dir.glob("*/seed-*/results.json")):
        results = json.loads(path.read_text())
        runs[(path.parent.parent.name, int(results["seed"]))] = results
    return runs


def measure(task_dir: Path) -> dict:
    runs = runs_of(task_dir)
    some = next(iter(runs.values()))
    metric = some["main_metric"]
    split = next(iter(some["eval"]))
    plain = {s: r for (m, s), r in runs.items() if m == "none"}
    raw_sd, delta_sd, eval_sd, correlation, points, means = [], [], [], [], [], []
    for method in sorted({m for m, _ in runs} - {"none"}):
        seeds = sorted(s for (m, s) in runs if m == method and s in plain)
        if len(seeds) < 3:
            continue
        val = np.array([runs[(method, s)]["validation"][metric] for s in seeds])
        base = np.array([plain[s]["validation"][metric] for s in seeds])
        loss = np.array(
            [runs[(method, s)]["validation"]["loss"] - plain[s]["validation"]["loss"] for s in seeds]
        )
        ev = np.array(
            [runs[(method, s)]["eval"][split][metric] - plain[s]["eval"][split][metric] for s in seeds]
        )
        raw_sd.append(float(np.std(val, ddof=1)))
        delta_sd.append(float(np.std(val - base, ddof=1)))
        eval_sd.append(float(np.std(ev, ddof=1)))
        correlation.append(float(np.corrcoef(val, base)[0, 1]))
        rows = np.stack([val - base, -loss, ev], axis=1)
        points.append(rows)
        means.append(rows.mean(axis=0))
    every = np.concatenate(points)
    by_method = np.array(means)
    return {
        "task": task_dir.name,
        "metric": metric,
        "split": split,
        "methods": len(means),
        "runs": len(every),
        "sd_validation_score": statistics.median(raw_sd),
        "sd_validation_delta": statistics.median(delta_sd),
        "sd_eval_delta": statistics.median(eval_sd),
        "correlation_with_plain": statistics.median(correlation),
        "rho_metric_runs": float(stats.spearmanr(every[:, 0], every[:, 2])[0]),
        "rho_metric_methods": float(stats.spearmanr(by_method[:, 0], by_method[:, 2])[0]),
        "rho_loss_runs": float(stats.spearmanr(every[:, 1], every[:, 2])[0]),
        "rho_loss_methods": float(stats.spearmanr(by_method[:, 1], by_method[:, 2])[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default="results/regime")
    parser.add_argument("--out", default=None, help="also write the table here (markdown)")
    args = parser.parse_args()
    tasks = [
        d for model in sorted(Path(args.root).iterdir()) if model.is_dir() for d in sorted(model.iterdir())
    ]
    rows = [measure(d) for d in tasks if d.is_dir() and any(d.glob("*/seed-*/results.json"))]
    lines = [
        f"# The search objective's signal, measured on {args.root} (no training)",
        "",
        "sd: over seeds, x100 (median over the methods). rho: Spearman's, against the evaluation split's "
        "paired difference (method minus plain, same seed).",
        "",
        "| task | metric | methods x seeds | sd validation score | sd validation Δ | sd eval Δ | r(method, plain) "
        "| rho Δmetric (runs / means) | rho -Δloss (runs / means) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['metric']} on {r['split']} | {r['runs']} | {100 * r['sd_validation_score']:.1f} | "
            f"{100 * r['sd_validation_delta']:.1f} | {100 * r['sd_eval_delta']:.1f} | {r['correlation_with_plain']:+.2f} | "
            f"{r['rho_metric_runs']:+.2f} / {r['rho_metric_methods']:+.2f} | "
            f"{r['rho_loss_runs']:+.2f} / {r['rho_loss_methods']:+.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
