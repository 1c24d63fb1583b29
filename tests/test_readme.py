"""The documentation's code blocks that claim to run, run (the README points to these pages)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from attendout.attention import get_controller
from conftest import make_batch, no_dropout, tiny_model

DOCS = Path(__file__).resolve().parents[1] / "docs"


def block(page: str, marker: str) -> str:
    """The ```python block right after ``<!-- marker -->`` in ``docs/<page>``."""
    text = (DOCS / page).read_text()
    found = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert found, f"docs/{page} has no python block after <!-- {marker} -->"
    return found.group(1)


class Held:
    """Labelled examples: the EvalSource the loop example needs."""

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
    page = "guides/python-loop.md"
    exec(compile(block(page, "plain-loop"), str(DOCS / page), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "addrop 1 {'addrop/active': 1.0" in printed  # plain first epoch, AD-DROP in the second
    assert "addrop 0 {'addrop/active': 0.0" in printed
    strategy = namespace["strategy"]
    assert strategy.games == 1 and strategy.policy.updates == 0  # 12 steps: one game, which sets b
    assert namespace["best"] in (strategy.defender, strategy.attacker)


def test_the_quick_start_apply_example_drops_scores_and_leaves_the_model_stock(capsys):
    torch.manual_seed(0)
    model = tiny_model("bert")
    namespace = {
        "model": model,
        "loader": [make_batch(batch=4, length=10, pad_from={1: 6}, seed=s) for s in range(3)],
        "optimizer": torch.optim.SGD(model.parameters(), lr=1e-3),
    }
    page = "quickstart.md"
    exec(compile(block(page, "apply"), str(DOCS / page), "exec"), namespace)
    assert "scores-dropout/drop_rate/L0" in capsys.readouterr().out
    controller = get_controller(model)
    assert controller is None or not controller.methods  # removed: the model runs stock attention
