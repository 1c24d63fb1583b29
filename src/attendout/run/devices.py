"""Where and how a run computes: the device, the process group, the precision, the random generators.

* :func:`pick_device` and :func:`process_group`: the device of a ``device`` setting, and the process
  group a run joins when torchrun or ``accelerate launch`` start several processes;
* :func:`autocast_dtype` and :func:`mixed_precision`: what a ``precision`` setting means for autocast
  and the gradient scaler;
* :func:`shard`, :func:`check_batches_fit_processes` and :func:`data_parallel`: a batch shared out among
  the processes, and the model in DistributedDataParallel;
* :func:`set_seed`, :func:`rng_state` and :func:`set_rng_state`: the random generators, seeded, and
  their state as a checkpoint keeps it;
* :func:`environment`: the versions and hardware a run's config.json records.
"""

from __future__ import annotations

import os
import platform
import random
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config import check_device_name
from ..contract import Distributed
from ..version import __version__


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every random generator a training step may draw from (dropout, masks, the methods' samples).

    Plain data only (tensors, ints, floats, strings, lists), so that it loads with ``weights_only=True``.
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "numpy": [
            str(name),
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(pos),
            int(has_gauss),
            float(cached),
        ],
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    keys = np.asarray(keys.cpu().numpy() if isinstance(keys, torch.Tensor) else keys, dtype=np.uint32)
    np.random.set_state((name, keys, pos, has_gauss, cached))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def available_devices() -> list[str]:
    """The devices this machine has, as a ``device`` setting names them."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        out.append("mps")
    return out


def pick_device(name: str) -> torch.device:
    """The device of a ``device`` setting; "auto": a GPU if there is one, else the CPU.

    A device this machine lacks (``cuda`` with no GPU, ``cuda:3`` on a two-GPU machine, ``mps`` off a
    Mac) is a ValueError naming it and the devices there are, before any data or model is loaded.
    """
    available = available_devices()
    if name == "auto":
        gpu = [device for device in ("cuda:0", "mps") if device in available]
        return torch.device(gpu[0].removesuffix(":0") if gpu else "cpu")
    check_device_name(name)
    device = torch.device(name)
    if (f"cuda:{device.index or 0}" if device.type == "cuda" else device.type) not in available:
        raise ValueError(
            f"device {name!r} is not available on this machine; available: {', '.join(available)} (or auto)"
        )
    return device


def process_group(device: str) -> tuple[Distributed, torch.device]:
    """The process group this run is part of (torchrun / accelerate launch set WORLD_SIZE), and the device.

    Several processes: the group is joined through accelerate (gloo on CPU, NCCL on GPUs) and each
    process takes its local GPU; one process: no group, the ``device`` setting as given.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Distributed(), pick_device(device)
    from accelerate import PartialState

    on_cpu = pick_device(device).type == "cpu"
    state = PartialState(cpu=on_cpu)  # without cpu=True accelerate sees no group on a machine with no GPU
    if state.num_processes <= 1:
        raise RuntimeError(f"WORLD_SIZE is {os.environ['WORLD_SIZE']} but accelerate found no process group")
    chosen = torch.device("cpu") if on_cpu else state.device
    return Distributed(state.process_index, state.num_processes, chosen), chosen


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a ``precision`` setting: None for fp32 (no autocast)."""
    dtypes = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in dtypes:
        raise ValueError(f"precision must be one of {', '.join(dtypes)}, got {precision!r}")
    return dtypes[precision]


def mixed_precision(precision: str, device: torch.device) -> tuple[torch.dtype | None, torch.amp.GradScaler]:
    """(autocast dtype, gradient scaler) of a ``precision`` setting; the scaler acts in fp16 only."""
    return autocast_dtype(precision), torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def check_batches_fit_processes(examples: int, batch_size: int, world: int) -> None:
    """Refuse a batch size with which some batch of ``examples`` has fewer rows than processes."""
    last = examples % batch_size
    if world > 1 and (batch_size < world or 0 < last < world):
        raise ValueError(
            f"batch_size {batch_size} over {world} processes: every batch is shared out among the processes, "
            f"and {'a batch' if batch_size < world else f'the last batch of each epoch ({last} examples)'} has "
            "fewer examples than processes; choose another --batch-size or --max-train-samples"
        )


def shard(batch: dict[str, torch.Tensor], distributed: Distributed) -> dict[str, torch.Tensor]:
    """This process's consecutive rows of ``batch`` (all of it in one process)."""
    world = distributed.world_size
    if world == 1:
        return batch
    rows = len(next(iter(batch.values())))
    bounds = [rows * r // world for r in range(world + 1)]
    start, stop = bounds[distributed.rank], bounds[distributed.rank + 1]
    return {k: v[start:stop] for k, v in batch.items()}


def data_parallel(model: nn.Module, device: torch.device, find_unused: bool) -> nn.Module:
    """``model`` in DistributedDataParallel on ``device`` (the process group is joined already)."""
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(
        model, device_ids=device_ids, find_unused_parameters=find_unused
    )


def environment() -> dict[str, dict[str, object]]:
    """The versions and the hardware a run records in its config.json."""
    import transformers

    return {
        "versions": {
            "attendout": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "hardware": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(),
        },
    }
