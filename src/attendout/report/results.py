"""A finished run's results.json in words: the metrics table and the truncation line that
``attendout finetune`` prints when a run ends."""

from __future__ import annotations

from typing import Any

from .render import markdown_table


def format_truncation(results: dict[str, Any]) -> str | None:
    """One line on how many examples were longer than max_length and how they were cut (None if none)."""
    summary = results.get("truncation") or {}
    cut = summary.get("cut") or {}
    if not any(cut.values()):
        return None
    sizes = results.get("sizes") or {}
    how = {
        "head-tail": f"kept the first {summary.get('head')} and the last {summary.get('tail')} pieces",
        "head": "kept the first pieces",
        "sliding": f"windows with {summary.get('stride')} pieces of overlap, logits averaged",
    }.get(summary.get("strategy"), summary.get("strategy"))
    counts = ", ".join(
        f"{n}{f' of {sizes[split]}' if split in sizes else ''} {split}" for split, n in cut.items()
    )
    tagged = summary.get("cut_words_tagged")
    words = f"; the words past the cut are tagged {tagged}" if tagged else ""
    return (
        f"longer than {summary.get('max_length')} pieces: {counts} ({summary.get('strategy')}: {how}{words})"
    )


def format_results(results: dict[str, Any]) -> str:
    """A small Markdown table of the validation and evaluation metrics of a run."""
    rows = [("validation (model selection)", results["validation"])] + list(results["eval"].items())
    stop = results.get("stopped_early")
    note = (
        f"stopped early at step {stop['step']} of {results['total_steps']} (no better validation in "
        f"{stop['patience']} evaluations); best step {results['best_step']}\n\n"
        if stop
        else ""
    )
    names = [m for m in next(iter(results["eval"].values()), results["validation"]) if m != "loss"]
    cells = [[split, *(f"{metrics.get(n, float('nan')):.4f}" for n in names)] for split, metrics in rows]
    return note + "\n".join(markdown_table(["split", *names], cells))
