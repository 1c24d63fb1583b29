"""AttendOut's part in the attention hook: the Attacker's guard (:class:`MaskSlot`). The masks themselves
come from the Generator (:mod:`.generator`), through each training forward's edits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...attention import AttentionMethod

if TYPE_CHECKING:
    from .config import AttendOutConfig


class MaskSlot(AttentionMethod):
    """The Attacker's end of the hook: a guard that every training forward brings its masks.

    The masks of one forward travel as its keyword argument (:data:`attendout.contract.EDITS_KWARG`),
    which the hook applies to the scores (eq. 3); a training forward without them raises instead of
    training plainly. Eval mode is never asked (the hook leaves eval-mode models alone).
    """

    name = "attendout"
    without_edits = (
        "attendout: a training forward of a model with AttendOut came without the Attacker's masks, "
        "so it would train plainly. AttendOut trains a Defender and an Attacker and plays games "
        "between them: use attendout.prepare(model, 'attendout') in your loop, attendout.hf.Trainer, "
        "or `attendout finetune --method attendout` (to drop scores by masks of your own, pass "
        "model(**batch, **attendout.ForwardEdits({layer: AttentionEdit(drop_scores=mask)}).kwargs()))"
    )

    def __init__(self, layers: Sequence[int] | None = None) -> None:
        self.layers = layers


def mask_slot(config: AttendOutConfig) -> MaskSlot:
    """AttendOut's part in :func:`attendout.apply`: the Attacker's guard alone, so a training forward must
    bring its masks.

    AttendOut itself (Defender, Attacker, Generator, the game) runs through its training strategy:
    ``attendout.prepare(model, "attendout")`` in any loop, ``attendout.hf.Trainer``, or
    ``attendout finetune --method attendout``. A model given ``apply(model, "attendout")`` and trained by
    a loop that knows nothing of AttendOut raises at its first training forward.
    """
    return MaskSlot(config.layers)
