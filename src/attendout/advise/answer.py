"""Stage 4 of ``advise``: the answer in one sentence (its files: :mod:`.files`).

First, whether an answer is possible at all. The answer says plainly that it cannot answer, what stands
in the way and what to do, instead of recommending, when (in this order; the sentence's own word in
quotes, for users and checks that look for it):

* plain training is at "chance" level on the evaluation split: its mean score is within the chance
  margin (1 point, or 1% for perplexity and the loss: :mod:`.scales`) of the split's chance floor, the
  best score any constant prediction reaches there (:func:`attendout.report.stats.chance_floor`: the
  majority class for accuracy, MCC 0, for F1 the better of always the majority and always the positive
  class, 0 for a correlation; for BLEU, chrF and ROUGE, :func:`attendout.report.stats.copy_floor`, the
  score of copying the source, from the sources a seq2seq run stores; for perplexity, a unigram model's,
  which a language-model run reports). It learned nothing at this budget, and no regulariser can be
  judged on it. Where the floor is unknown (the loss; runs stored before these floors) this check is not
  made;
* no method won and the design could not have detected a gain of ``detect`` (2 points by default, or 2%
  for perplexity and the loss: :mod:`.scales`): it then says how many seeds would detect 1 and 2 points
  at the noise it measured, as a range over that noise's 80% interval (:func:`.power.seeds_range`).

Otherwise the verdict follows the confirmation only: a method is recommended when its confirmed difference
from plain training on the evaluation split is a gain (positive; negative for a metric where lower is
better) with a Holm-adjusted p below ``alpha`` (the largest such gain if several are); otherwise the
answer is plain training, with the smallest true gain the confirmation would have detected (80% power at
Holm's strictest level, at the 90% upper bound of the measured noise: :mod:`.power`), so "none of them"
says how large a gain could have hidden. A method
significantly worse than plain training (a loss with p_Holm below ``alpha``) is said to hurt; "the
closest" is only ever one that did not. The search's validation scores never decide: they are the scores
the settings were chosen on.

The budget (:func:`attendout.advise.regime.read_trend`): where plain training is still learning when the
budget stops (it "undertrain"s), the first sentence says so, and that the answer is one for training at
that budget, not for a model trained until it stops improving; where that cannot be told (fewer than four
validations), a sentence after the answer says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..report.render import format_value
from ..tasks import higher_is_better
from .confirm import Confirmation, ConfirmRow
from .power import seeds_range
from .regime import UNKNOWN, Trend
from .scales import chance_margin, default_detect, describe_amount, in_metric_units, is_relative, points


@dataclass(frozen=True)
class Verdict:
    """The recommendation: a method's confirmed row, or None for plain training."""

    winner: ConfirmRow | None
    sentence: str
    answered: bool = True  # False: the sentence says why no answer is possible (chance, ...)
    budget: str = "not read"  # plain training at the budget: "still learning", "not rising", "cannot tell"


def format_p(value: float) -> str:
    return "–" if not math.isfinite(value) else ("< 0.001" if value < 0.001 else f"{value:.3f}")


def gain(metric: str, delta: float) -> float:
    """A paired difference (method minus plain) in the metric's direction: positive is better."""
    return delta if higher_is_better(metric) else -delta


def hurting(confirmation: Confirmation, alpha: float = 0.05) -> list[ConfirmRow]:
    """The methods significantly worse than plain training: a loss with p_Holm below ``alpha``."""
    m = confirmation.metric
    return [
        r for r in confirmation.rows if gain(m, r.delta) < 0 and math.isfinite(r.p_holm) and r.p_holm < alpha
    ]


def _difference(confirmation: Confirmation, delta: float) -> str:
    """A method's difference from plain training for a sentence: "+1.2 accuracy points", "perplexity -4.0"."""
    m = confirmation.metric
    return (
        f"{format_value(delta, m, True)} {m} points"
        if higher_is_better(m)
        else f"{m} {format_value(delta, m, True)}"
    )


def _share(confirmation: Confirmation, amount: float) -> str:
    """For a relative metric, ``amount`` as a share of plain training's score ("1.7% of plain fine-tuning's
    150"); empty for any other metric, or without a score."""
    base = confirmation.rows[0].baseline_mean if confirmation.rows else float("nan")
    if not is_relative(confirmation.metric) or not math.isfinite(base) or base == 0:
        return ""
    return f"{100 * amount / abs(base):.2g}% of {confirmation.plain}'s {base:.4g}"


def _size(confirmation: Confirmation, amount: float) -> str:
    """A size in the metric's values for a sentence: "4.3 mcc points", "2.5 perplexity (1.7% of ...)"."""
    m = confirmation.metric
    if not is_relative(m):
        return f"{format_value(amount, m)} {m} points"
    share = _share(confirmation, amount)
    return f"{amount:.3g} {m}" + (f" ({share})" if share else "")


def _chance(confirmation: Confirmation) -> str | None:
    """The 'chance' sentence, if plain training scored within the chance margin of the chance floor."""
    floor, rows, m = confirmation.floor, confirmation.rows, confirmation.metric
    if floor is None or not rows:
        return None
    base = rows[0].baseline_mean
    if not math.isfinite(base) or gain(m, base - floor) > chance_margin(m, floor):
        return None
    plain = confirmation.plain
    return (
        f"Cannot answer: {plain} is at chance level on {confirmation.split} ({m} {base:.4f}; "
        f"{confirmation.floor_constant} scores {floor:.4f}, {confirmation.floor_what}), so it learned "
        "nothing at this budget and no method can be judged against it. Give it more epochs (or a learning rate "
        "it learns with), check the labels, then rerun advise in a new --output-dir."
    )


def _undetectable(confirmation: Confirmation, alpha: float, detect: float) -> str | None:
    """The sentence when no method won and the design could not detect a gain of ``detect`` (on the
    metric's scale: :mod:`.scales`)."""
    c, m = confirmation, confirmation.metric
    d = c.detectable
    base = c.rows[0].baseline_mean if c.rows else float("nan")
    if not math.isfinite(d) or not math.isfinite(base) or d <= in_metric_units(m, detect, base):
        return None
    sd = c.noise.sd  # one seed's paired difference, pooled over the methods
    family = len(c.rows)
    needs = []
    for count in (1, 2):
        low, high = seeds_range(c.noise, in_metric_units(m, points(m, count), base), alpha, family)
        wanted = (
            f"a {describe_amount(m, points(m, count))} fall"
            if is_relative(m)
            else f"+{describe_amount(m, points(m, count))}"
        )
        needs.append(f"{_count_range(low, high)} seeds would detect {wanted}")
    noise = f"{sd:.3g} {m}" if is_relative(m) else f"{format_value(sd, m)} points"
    return (
        f"Cannot answer: this design cannot detect a gain you would care about: with {len(c.seeds)} seeds only "
        f"a true difference of {_size(c, d)} or more would have been detected (80% power, Holm over "
        f"{family}, {_bound(c)}), and the smallest gain asked for is {describe_amount(m, detect)} (--detect). At "
        f"the noise measured here ({noise} a seed, {c.noise.df:.3g} degrees of freedom), {needs[0]} and "
        f"{needs[1]} (over the noise's 80% interval; --seeds N, or --seeds auto); a larger evaluation split "
        "narrows the noise too."
    )


def _count_range(low: int | None, high: int | None) -> str:
    """'12 to 40', 'more than 200', '12 to more than 200', or one count where both ends agree."""
    if low is None:
        return "more than 200"
    if high is None:
        return f"{low} to more than 200"
    return str(low) if low == high else f"{low} to {high}"


def _bound(confirmation: Confirmation) -> str:
    """How the detectable difference was computed, for a sentence."""
    return (
        f"at the {100 * confirmation.confidence:.0f}% upper bound of the seeds' noise, so this holds in "
        f"{100 * confirmation.confidence:.0f}% of studies"
    )


def _recommendation(w: ConfirmRow, confirmation: Confirmation, detect: float) -> str:
    """'Use X at its setting: the gain, its interval, p_Holm, the cost' (and whether it is below --detect)."""
    c, m = confirmation, confirmation.metric
    half = (w.t_high - w.t_low) / 2
    amount = f"{format_value(w.delta, m, True)} ± {format_value(half, m)}"
    if higher_is_better(m):
        what = f"{amount} {m} points over {c.plain}"
    else:
        share = f"{100 * w.delta / abs(w.baseline_mean):+.2g}%, " if w.baseline_mean else ""
        what = f"{m} {amount} against {c.plain} ({share}lower is better)"
    cost = f", {w.cost:.2f}x the time of a plain run" if w.cost is not None else ""
    small = (
        f"; below the {describe_amount(m, detect)} asked for with --detect"
        if gain(m, w.delta) < in_metric_units(m, detect, w.baseline_mean)
        else ""
    )
    return (
        f"Use {w.method} at {w.setting}: {what} on {c.split} (95% interval over {w.seeds} "
        f"{'fresh seeds' if c.fresh else 'seeds, runs not fresh to this study'}, "
        f"p_Holm {format_p(w.p_holm)}{cost}{small})."
    )


def _closest(confirmation: Confirmation, alpha: float) -> str:
    """' The closest, X at its setting, gave ...' among the methods that did not hurt (empty if none)."""
    m = confirmation.metric
    hurt = {r.method for r in hurting(confirmation, alpha)}
    rest = [r for r in confirmation.rows if r.method not in hurt]
    best = max(rest, key=lambda r: gain(m, r.delta), default=None)
    if best is None:
        return ""
    shown = format_value(best.delta, m, True) + ("" if higher_is_better(m) else f" {m}")
    return f" The closest, {best.method} at {best.setting}, gave {shown} (p_Holm {format_p(best.p_holm)})."


def _hurts(confirmation: Confirmation, alpha: float) -> str:
    """' It hurts, significantly worse than plain training: X at its setting gave ...' (every such method)."""
    hurt = hurting(confirmation, alpha)
    if not hurt:
        return ""
    each = "; ".join(
        f"{r.method} at {r.setting} gave {_difference(confirmation, r.delta)} (p_Holm {format_p(r.p_holm)})"
        for r in hurt
    )
    verb = "It hurts" if len(hurt) == 1 else "They hurt"
    return f" {verb}, significantly worse than {confirmation.plain}: {each}."


def _none_of_them(confirmation: Confirmation) -> str:
    """'None of them: ...' with the gain the design would have detected."""
    c, d, m = confirmation, confirmation.detectable, confirmation.metric
    if not (math.isfinite(d) and d > 0):
        power = "the seeds' differences had no spread, so no detectable gain can be estimated"
    elif higher_is_better(m):
        power = f"a true gain of {format_value(d, m)} {m} points or more would have been detected"
    else:
        power = f"a true fall of {format_value(d, m)} in {m} or more would have been detected"
    if math.isfinite(d) and d > 0:
        share = _share(c, d)
        power += f" with 80% power ({_bound(c)}" + (f"; {share})" if share else ")")
    seeds = len(c.seeds)
    fresh = "fresh seeds" if c.fresh else "seeds (runs not fresh to this study)"
    return (
        f"None of them: no method's tuned setting beat {c.plain} on {c.split} over {seeds} {fresh}; {power}."
    )


def verdict(
    confirmation: Confirmation,
    alpha: float = 0.05,
    *,
    detect: float | None = None,
    trend: Trend | None = None,
) -> Verdict:
    """The plain answer of a (complete or partial) confirmation; see the module docstring.

    ``detect``: the smallest gain a user cares about, on the metric's scale (default:
    :func:`.scales.default_detect`); ``trend``: plain training's validation trend at the budget
    (:func:`attendout.advise.regime.read_trend`), or None where it was not read.
    """
    c = confirmation
    detect = default_detect(c.metric) if detect is None else detect
    partial = "" if c.complete else " (the confirmation is not complete yet: rerun advise to finish it)"
    chance = _chance(c)
    if chance is not None:
        return Verdict(None, chance + partial, answered=False, budget=_state(trend))
    good = [r for r in c.rows if gain(c.metric, r.delta) > 0 and r.p_holm < alpha]  # NaN p_Holm: never
    hurts = _hurts(c, alpha)
    if good:
        w = max(good, key=lambda r: gain(c.metric, r.delta))
        core = Verdict(w, _recommendation(w, c, detect) + hurts + partial)
    else:
        blind = _undetectable(c, alpha, detect)
        if blind is not None:
            core = Verdict(None, f"{blind}{_closest(c, alpha)}{hurts}{partial}", answered=False)
        else:
            plainly = "Train plainly." if c.plain == "plain training" else "Fine-tune plainly."
            core = Verdict(None, f"{_none_of_them(c)}{_closest(c, alpha)}{hurts} {plainly}{partial}")
    if not c.fresh and "not fresh" not in core.sentence:
        core = Verdict(
            core.winner,
            f"{core.sentence} Runs not fresh to this study: {len(c.reused)} were copied in by --reuse-runs.",
            core.answered,
        )
    return _at_the_budget(core, c, trend)


def _state(trend: Trend | None) -> str:
    return "not read" if trend is None else trend.state


def _at_the_budget(core: Verdict, confirmation: Confirmation, trend: Trend | None) -> Verdict:
    """The answer with what the budget's trend adds: a recommendation made while plain training is still
    learning says so first; a budget whose trend cannot be read says so after."""
    sentence = core.sentence
    if trend is not None and trend.learning:
        where = (
            f"At this budget ({trend.budget} epochs) {confirmation.plain} is still learning, so it undertrains "
            f"({trend.evidence})"
        )
        if core.answered:
            sentence = (
                f"{where} and this answer is for {trend.budget}-epoch training, not for a model trained until it "
                f"stops improving: {sentence[0].lower()}{sentence[1:]}"
            )
        else:
            sentence = f"{sentence} {where}."
    elif trend is not None and trend.state == UNKNOWN:
        sentence = f"{sentence} {trend.sentence[0].upper()}{trend.sentence[1:]}."
    return Verdict(core.winner, sentence, core.answered, _state(trend))
