"""``attendout inspect``: AD-DROP's view of one example drawn as PNG (:mod:`attendout.report.inspect`)."""

from __future__ import annotations

import argparse

from .flags import add_dataclass_options, dataclass_from_args

#: AD-DROP's options the drawing takes (flags of their name, then settled as a run settles them).
_DRAWN = ("attribution", "p", "q", "ig_steps", "ig_form", "rounding")


def main(argv: list[str]) -> int:
    """Draw AD-DROP's view of one example: attention map, attribution, candidates, drops (002 Figure 1)."""
    from ..methods import ADDropConfig
    from ..report.inspect import inspect_text, load_for_inspection, plot_inspection

    parser = argparse.ArgumentParser(
        prog="attendout inspect",
        description="Draw a layer's attention map of one text (or pair) with AD-DROP's attribution as "
        "shading, the candidate discard region and the dropped positions (paper 002 Figure 1), as PNG.",
    )
    parser.add_argument("--text", required=True, help="the text (first segment of a pair)")
    parser.add_argument("--text-pair", default=None, help="second segment of a sentence pair")
    parser.add_argument(
        "--model", default="minilm", help="run directory, model folder, 'minilm' or hub id (default: minilm)"
    )
    parser.add_argument("--layer", type=int, default=0, help="layer to draw, from 0 (default: 0)")
    parser.add_argument("--head", default="0", help="head index from 0, or 'mean' (default: 0)")
    add_dataclass_options(parser, ADDropConfig, only=_DRAWN)
    parser.add_argument(
        "--num-labels",
        type=int,
        default=2,
        help="labels of a random head for a model without one (default: 2)",
    )
    parser.add_argument("--max-length", type=int, default=64, help="maximum tokens (default: 64)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the drops (and of a random head) (default: 0)"
    )
    parser.add_argument("--output", default="inspect.png", help="PNG file to write (default: inspect.png)")
    args = parser.parse_args(argv)
    if args.head != "mean" and not args.head.isdigit():
        raise ValueError(f"--head must be a head index or 'mean', got {args.head!r}")
    options = dataclass_from_args(ADDropConfig, vars(args)).for_task(None)  # unset: the authors' defaults
    model, tokenizer, description = load_for_inspection(args.model, args.num_labels, args.seed)
    inspection = inspect_text(
        model,
        tokenizer,
        args.text,
        args.text_pair,
        layer=args.layer,
        seed=args.seed,
        **{name: getattr(options, name) for name in _DRAWN},
        max_length=args.max_length,
        model_name=description,
    )
    path = plot_inspection(inspection, args.output, head=None if args.head == "mean" else int(args.head))
    prediction = f"{inspection.prediction}; " if inspection.predicted else ""
    print(
        f"{description}\nlayer {args.layer}, head {args.head}: {len(inspection.tokens)} tokens; {prediction}"
        f"{int(inspection.candidate.sum())} candidate and {int(inspection.dropped.sum())} dropped positions "
        f"over {inspection.candidate.shape[0]} heads\nwrote {path}"
    )
    return 0
