"""Runs under torchrun for tests/test_distributed.py: several fine-tuning runs in one process group.

argv[1]: JSON {"dump": folder, "jobs": [{"name": ..., "config": TrainConfig fields}, ...]}. Each process
saves its final weights (and AttendOut's Generator) to DUMP/NAME-rankR.pt. A job with "interrupt_at": N
stops every process when step N begins (as a killed run would, after its last checkpoint) and then
goes on with resume=True, as the same command with --resume would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from attendout.config import TrainConfig
from attendout.run.loop import TrainingLoop


class Interrupted(Exception):
    """Stands for a kill: the run stops between two steps."""


def main() -> None:
    torch.set_num_threads(1)
    spec = json.loads(sys.argv[1])
    for job in spec["jobs"]:
        trainer = TrainingLoop(TrainConfig(**job["config"]))
        if "interrupt_at" in job:
            step = trainer.train_step

            def interrupted(batch, trainer=trainer, step=step, at=job["interrupt_at"]):
                if trainer.state.step == at:
                    raise Interrupted
                return step(batch)

            trainer.train_step = interrupted
            try:
                trainer.fit()
            except Interrupted:
                pass
            trainer = TrainingLoop(TrainConfig(**{**job["config"], "resume": True}))
            assert trainer.run.resumed_at is not None, "no checkpoint to resume from"
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
