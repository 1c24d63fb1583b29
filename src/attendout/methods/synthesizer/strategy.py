"""How the fine-tuning loop trains, saves and restores a synthesized model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ...core.folder import save_model_atomic
from ...core.optim import param_groups
from ..base import TrainingStrategy, apply
from .checkpoint import load_synthesized_weights
from .method import MODULE_NAME, save_synthesized

if TYPE_CHECKING:
    from .config import SynthesizerConfig


class SynthesizerStrategy(TrainingStrategy):
    """Synthesize the loaded model, train its new parameters at their own learning rate, and save
    and restore it in the synthesized form (:mod:`.checkpoint`) instead of ``save_pretrained``.

    l_max defaults to the loop's ``max_length`` (inputs are truncated to it, so none is too long);
    a loop that does not know its longest input must set ``l_max``.
    """

    config: SynthesizerConfig

    def attach(self, model: nn.Module, *, max_length: int | None = None) -> None:
        config = self.config
        if config.l_max is None:
            if max_length is None:
                raise ValueError(
                    "synthesizer: l_max (the longest input the synthesized layers accept) is not set and "
                    "this loop does not say its maximum length; pass l_max"
                )
            config = dataclasses.replace(config, l_max=max_length)
        self.model = model
        self.handle = apply(model, config)

    def param_groups(self, model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
        """The model's groups, and the synthesized layers' new weights at ``synthesizer_lr``."""
        new = [p for p in getattr(model, MODULE_NAME).parameters() if p.requires_grad]
        lr = self.config.synthesizer_lr
        extra = [
            {"params": [p for p in new if p.ndim >= 2], "lr": lr, "weight_decay": weight_decay},
            {"params": [p for p in new if p.ndim < 2], "lr": lr, "weight_decay": 0.0},
        ]
        claimed = {id(p) for p in new}
        return param_groups(model, weight_decay, skip=claimed) + [g for g in extra if g["params"]]

    def save_model(self, path: Path, tokenizer: Any) -> None:
        save_model_atomic(self.eval_model(), tokenizer, path, save=save_synthesized)

    def load_best(self, path: Path) -> None:
        load_synthesized_weights(self.eval_model(), path)
