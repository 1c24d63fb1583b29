"""Runs under torchrun for tests/test_distributed.py: several fine-tuning runs in one process group.

argv[1]: JSON {"dump": folder, "jobs": [{"name": ..., "config": TrainConfig fields}, ...]}. Each process
saves its final weights (and AttendOut's Generator) to DUMP/NAME-rankR.pt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from attendout.train import TrainConfig, Trainer


def main() -> None:
    torch.set_num_threads(1)
    spec = json.loads(sys.argv[1])
    for job in spec["jobs"]:
        trainer = Trainer(TrainConfig(**job["config"]))
        trainer.fit()
        dump = {"model": trainer.model.state_dict(), "processes": trainer.distributed.world_size}
        strategy = trainer.strategy
        if hasattr(strategy, "generator"):
            dump["generator"] = strategy.generator.state_dict()
            dump["games"] = strategy.games
        path = Path(spec["dump"]) / f"{job['name']}-rank{trainer.distributed.rank}.pt"
        torch.save(dump, path)


if __name__ == "__main__":
    main()
