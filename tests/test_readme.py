"""The README's code blocks that claim to run, run."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from conftest import make_batch, no_dropout, tiny_model

README = Path(__file__).resolve().parents[1] / "README.md"


def block(marker: str) -> str:
    """The ```python block right after ``<!-- marker -->`` in the README."""
    text = README.read_text()
    found = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert found, f"README has no python block after <!-- {marker} -->"
    return found.group(1)


class Held:
    """Labelled examples: the EvalSource the README's loop needs."""

    def __init__(self, batch: dict[str, torch.Tensor]) -> None:
        self.data = batch
        self.labels = batch["labels"]

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return {k: v[indices] for k, v in self.data.items()}


def test_the_plain_loop_example_trains_with_addrop_and_attendout(capsys):
    torch.manual_seed(0)
    namespace = {
        "model": tiny_model("bert", **no_dropout("bert")),
        "batches": [make_batch(batch=8, length=10, pad_from={1: 6}, seed=s) for s in range(6)],
        "validation": Held(make_batch(batch=16, length=10, seed=99)),
    }
    exec(compile(block("plain-loop"), str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "addrop 1 {'addrop/active': 1.0" in printed  # plain first epoch, AD-DROP in the second
    assert "addrop 0 {'addrop/active': 0.0" in printed
    strategy = namespace["strategy"]
    assert strategy.games == 1 and strategy.policy.updates == 0  # 12 steps: one game, which sets b
    assert namespace["best"] in (strategy.defender, strategy.attacker)
