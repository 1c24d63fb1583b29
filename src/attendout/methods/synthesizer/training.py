"""How the fine-tuning loop trains, saves and restores a synthesized model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..base import TrainingStrategy, apply
from .checkpoint import load_synthesized_weights, save_synthesized
from .config import SynthesizerConfig
from .method import MODULE_NAME

__all__ = ["SynthesizerStrategy"]


class SynthesizerStrategy(TrainingStrategy):
    """Synthesize the loaded model, train its new parameters at their own learning rate, and save
    and restore it in the synthesized form (:mod:`.checkpoint`) instead of ``save_pretrained``.

    l_max defaults to the run's ``max_length`` (inputs are truncated to it, so none is too long).
    """

    def __init__(self, config: SynthesizerConfig) -> None:
        self.config = config

    def setup(self, trainer: Any) -> None:
        config = self.config
        if config.l_max is None:
            config = dataclasses.replace(config, l_max=trainer.config.max_length)
        self.handle = apply(trainer.model, config)
        new = [p for p in getattr(trainer.model, MODULE_NAME).parameters() if p.requires_grad]
        lr = config.synthesizer_lr
        trainer.build_optimizer(
            [
                {
                    "params": [p for p in new if p.ndim >= 2],
                    "lr": lr,
                    "weight_decay": trainer.config.weight_decay,
                },
                {"params": [p for p in new if p.ndim < 2], "lr": lr, "weight_decay": 0.0},
            ]
        )

    def save_model(self, trainer: Any, path: Path) -> None:
        from ...train import save_model_atomic

        save_model_atomic(self.eval_model(trainer), trainer.tokenizer, path, save=save_synthesized)

    def load_best(self, trainer: Any, path: Path) -> None:
        load_synthesized_weights(self.eval_model(trainer), path)
