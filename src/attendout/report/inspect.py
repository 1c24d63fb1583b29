"""Seeing AD-DROP on one example: a layer's attention map, its attribution, the candidate region and
the dropped positions (paper 002, Figure 1), as PNG.

:func:`inspect_text` runs AD-DROP's attribution pass on one text (or pair) and draws the masks a
training step would use; :func:`plot_inspection` draws the result. ``attendout inspect`` is the
command line for both::

    attendout inspect --model minilm --text "a gripping, funny film" --layer 0 --head 0 --output map.png
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core.folder import RunDir
from ..methods.addrop import attribute, candidate_region, sample_drops


@dataclass
class Inspection:
    """AD-DROP's view of one example at one layer (all heads kept; the plot picks one or the mean).

    attention, scores, candidate, dropped: (H, L, L) arrays (weights, attribution, bool, bool).
    """

    tokens: list[str]
    layer: int
    attribution: str
    p: float
    q: float
    attention: np.ndarray
    scores: np.ndarray
    candidate: np.ndarray
    dropped: np.ndarray
    predicted: str | None
    probability: float | None
    model: str

    @property
    def prediction(self) -> str:
        """``predicted X (0.93)`` (a token classifier: its tags, no probability), or ``""``."""
        if self.predicted is None:
            return ""
        share = "" if self.probability is None else f" ({self.probability:.2f})"
        return f"predicted {self.predicted}{share}"


def inspect_text(
    model: nn.Module,
    tokenizer,
    text: str,
    pair: str | None = None,
    *,
    layer: int = 0,
    attribution: str = "ga",
    p: float = 0.3,
    q: float = 0.2,
    ig_steps: int = 20,
    ig_form: str = "authors",
    rounding: str = "ceil",
    seed: int = 0,
    max_length: int = 64,
    model_name: str = "",
) -> Inspection:
    """Attribution, candidate region and sampled drops of ``layer`` for one example (002 Figure 1).

    The attribution pass runs as in training (eval mode, the model's flags restored afterwards); the
    drops are one sample with ``seed``.
    """
    num_layers = int(getattr(model.config, "num_hidden_layers", 0) or getattr(model.config, "n_layers", 0))
    if not 0 <= layer < num_layers:
        raise ValueError(f"layer must be in 0..{num_layers - 1} for this model, got {layer}")
    encoded = tokenizer(text, pair, truncation=True, max_length=max_length, return_tensors="pt")
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in encoded.items()}
    torch.manual_seed(seed)
    result = attribute(model, batch, [layer], attribution, ig_steps=ig_steps, ig_form=ig_form)
    scores = result.scores[layer]  # (1, H, L, L)
    valid = batch["attention_mask"].bool()[:, None, None, :]  # (1, 1, 1, L)
    generator = torch.Generator(device=device).manual_seed(seed)
    candidate = candidate_region(scores, valid, p, generator, rounding)  # (1, H, L, L)
    dropped = sample_drops(candidate, q, generator)  # (1, H, L, L)

    predicted = probability = None
    names = getattr(model.config, "id2label", None) or {}
    if result.logits is not None and result.logits.dim() == 3:  # token classifier: the predicted tags
        tags = result.logits[0].float().argmax(-1).tolist()  # (L,) one per piece, [CLS] and [SEP] included
        predicted = " ".join(str(names.get(t, t)) for t in tags[1:-1])
    elif result.logits is not None and result.logits.shape[-1] > 1:
        probs = torch.softmax(result.logits.float(), -1)[0]  # (C,)
        index = int(probs.argmax())
        predicted, probability = str(names.get(index, index)), float(probs[index])
    return Inspection(
        tokens=tokenizer.convert_ids_to_tokens(encoded["input_ids"][0].tolist()),
        layer=layer,
        attribution=attribution,
        p=p,
        q=q,
        attention=result.probs[layer][0].float().cpu().numpy(),
        scores=scores[0].cpu().numpy(),
        candidate=candidate[0].cpu().numpy(),
        dropped=dropped[0].cpu().numpy(),
        predicted=predicted,
        probability=probability,
        model=model_name,
    )


def _row_normalised(scores: np.ndarray) -> np.ndarray:
    """Min-max per query row, so the shading shows the ranking that picks the candidates."""
    low = scores.min(axis=-1, keepdims=True)
    span = scores.max(axis=-1, keepdims=True) - low
    return np.divide(scores - low, span, out=np.zeros_like(scores, dtype=float), where=span > 0)


def plot_inspection(inspection: Inspection, path: str | Path, head: int | None = 0) -> Path:
    """Draw the attention map and the attribution map with candidates and drops; write a PNG.

    ``head=None`` shows the mean over heads: attention and attribution are averaged, a cell is boxed as
    a candidate when it is one in at least half of the heads, and the size of a drop mark is the share
    of heads that dropped the position.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    heads = inspection.attention.shape[0]
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"head must be in 0..{heads - 1} or 'mean', got {head}")
    if head is None:
        attention = inspection.attention.mean(0)  # (L, L)
        shading = _row_normalised(inspection.scores.mean(0))
        candidate = inspection.candidate.mean(0) >= 0.5
        dropped = inspection.dropped.mean(0)  # share of heads, (L, L)
        which = f"mean of {heads} heads"
    else:
        attention = inspection.attention[head]
        shading = _row_normalised(inspection.scores[head])
        candidate = inspection.candidate[head]
        dropped = inspection.dropped[head].astype(float)
        which = f"head {head}"

    n = len(inspection.tokens)
    side = max(4.0, 0.24 * n)
    fig = Figure(figsize=(2 * side + 2.2, side + 1.4), dpi=110)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    font = max(4.0, min(9.0, 260.0 / n))

    image = left.imshow(attention, cmap="Blues", vmin=0, vmax=max(float(attention.max()), 1e-9))
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04, label="attention weight")
    left.set_title("attention weights", fontsize=10)

    image = right.imshow(shading, cmap="Greys", vmin=0, vmax=1)
    fig.colorbar(
        image, ax=right, fraction=0.046, pad=0.04, label=f"{inspection.attribution} attribution (row min-max)"
    )
    rows, cols = np.nonzero(candidate)
    for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
        right.add_patch(
            Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linestyle=":", linewidth=1.1)
        )
    rows, cols = np.nonzero(dropped)
    if len(rows):
        cell = 72.0 * side * 0.75 / n  # points per cell, roughly
        share = dropped[rows, cols]
        right.scatter(cols, rows, s=(0.8 * cell) ** 2 * share, facecolors="none", edgecolors="crimson")
        right.scatter(cols, rows, s=(0.55 * cell) ** 2 * share, marker="x", color="crimson")
    right.set_title(
        f"candidate region (red dotted, top p={inspection.p:g} per row) and dropped (x, q={inspection.q:g})"
        + (
            "\nmean: boxed if a candidate in half the heads or more; mark size = share of heads"
            if head is None
            else ""
        ),
        fontsize=9,
    )

    for axis in (left, right):
        axis.set_xticks(range(n), inspection.tokens, rotation=90, fontsize=font)
        axis.set_yticks(range(n), inspection.tokens, fontsize=font)
        axis.set_xlabel("key")
        axis.set_ylabel("query")

    prediction = f" | {inspection.prediction}" if inspection.predicted is not None else ""
    title = f"layer {inspection.layer}, {which} | AD-DROP {inspection.attribution}{prediction} | {inspection.model}"
    fig.suptitle(textwrap.fill(title, width=int(2 * side * 14)), fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def load_for_inspection(name: str, num_labels: int = 2, seed: int = 0) -> tuple[nn.Module, object, str]:
    """(model, tokenizer, description) of a run directory, a model folder, ``minilm`` or a hub id.

    A token classifier keeps its head (the attribution is then of its predicted tags, as AD-DROP's); a
    multiple-choice model is refused. A checkpoint without a head (``minilm``, any plain encoder) gets a random
    head of ``num_labels`` labels, initialised from ``seed``: its "predicted label" is arbitrary, but the
    attribution still shows which positions that label's logit depends on.
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification
    from transformers.utils import CONFIG_NAME

    from ..models import resolve_model
    from ..models.loading import head_class, load_tokenizer

    if (RunDir(name).model_dir / CONFIG_NAME).is_file():
        name = str(RunDir(name).model_dir)  # a run directory of `attendout finetune`
    path, description = resolve_model(name)
    config = AutoConfig.from_pretrained(path)
    architectures = [str(a) for a in config.architectures or []]
    if any(a.endswith("ForMultipleChoice") for a in architectures):
        raise ValueError(
            f"{name} is a multiple-choice model ({', '.join(architectures)}): inspect draws one text or a "
            "pair, not a question with its options"
        )
    has_head = any(a.endswith(("ForSequenceClassification", "ForTokenClassification")) for a in architectures)
    torch.manual_seed(seed)
    if has_head:  # its own head: a token classifier's attribution is of its predicted tags
        model = head_class(config).from_pretrained(path)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=num_labels)
        description += f", untrained {num_labels}-label head (seed {seed})"
    return model, load_tokenizer(path), description
