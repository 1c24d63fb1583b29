"""Per-cell summary of AttendOut runs: dev scores, final learned drop rates per layer, games and winners.

    python experiments/attendout_rates.py results/cpu-small/minilm/{cola,mrpc}/attendout-rate*/seed-*

Prints a Markdown table (one row per run directory) read from each run's results.json and log.jsonl:
the dev metrics, the last logged ``attendout/drop_prob/L{i}`` (the policy's mean rate per layer), the
Attacker's share of the games won, the mean probability with which the winner draw kept the better
model, and the mean and standard deviation of the real game rewards.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from attendout.methods.droplog import read_drop_pattern


def summary(run: Path) -> str:
    config = json.loads((run / "config.json").read_text())
    results = json.loads((run / "results.json").read_text())
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
    pattern = read_drop_pattern(run)
    final = [f"{values[-1]:.3f}" for values in pattern.layers.values()]
    games = [r for r in rows if "attendout/reward" in r]
    last = rows[max(i for i, r in enumerate(rows) if "attendout/win_rate" in r)]
    keep = [r["attendout/p_keep_better"] for r in rows if "attendout/p_keep_better" in r]
    rewards = [r["attendout/reward"] for r in games]
    scores = ", ".join(
        f"{split} {name} {100 * value:.1f}"
        for split, metrics in results["eval"].items()
        for name, value in metrics.items()
        if name != "loss" and name == config["task"]["metrics"][0]
    )
    control = (config["config"]["method_options"] or {}).get("reward_control", "none")
    source = (config["config"]["method_options"] or {}).get("validation_source", "validation")
    return (
        f"| {config['task']['name']} | {config['config']['seed']} | {control} | {source} | {scores} | "
        f"{' '.join(final)} | {last['attendout/win_rate']:.2f} | "
        f"{statistics.mean(keep):.2f} | {statistics.mean(rewards):+.4f} ± {statistics.stdev(rewards):.4f} |"
    )


def main(paths: list[str]) -> None:
    print(
        "| task | seed | reward control | games on | dev | final drop rate L0..L5 | A won | P(keep better) | reward |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        if (Path(path) / "results.json").is_file():
            print(summary(Path(path)))


if __name__ == "__main__":
    main(sys.argv[1:])
