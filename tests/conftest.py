"""Shared fixtures: tiny random models of each supported family, built in-process (never from a hub)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

# Tiny models run fastest on one thread, and CI machines are shared: no oversubscription. `make
# test-matrix` sets ATTENDOUT_TEST_THREADS to run the suite with other thread counts too (the split of
# a reduction over threads changes its rounding, which every cross-computation comparison must absorb).
# The processes a test starts (the CLI, bench and advise workers, torchrun) compute with as many threads:
# each would otherwise take every core, and OpenMP's idle threads spin, so that two test workers (make
# test runs one per core) spent a tenth of the suite's CPU time waiting on each other.
TEST_THREADS = os.environ.get("ATTENDOUT_TEST_THREADS", "1")
os.environ["OMP_NUM_THREADS"] = TEST_THREADS


def pytest_sessionstart(session) -> None:
    """torch's thread count, in each process that runs tests. pytest-xdist's controller runs none: it
    imports neither torch nor transformers (5 s of CPU before it starts the workers)."""
    if not session.config.pluginmanager.hasplugin("dsession"):
        import torch

        torch.set_num_threads(int(TEST_THREADS))


@pytest.fixture(autouse=True)
def suite_threads():
    """Each test starts with the suite's torch thread count (ATTENDOUT_TEST_THREADS), whatever the test
    before it set: a command run in this process with ``--threads 1`` (``main(["bench", ..., "--threads",
    "1"])``) sets torch's count for the whole process, and every later test of the worker would have run
    on one thread, so that `make test-matrix`'s setting of 2 held only until the first such test. Reset
    after each test too, so that the count the summary reports is the suite's."""
    _suite_threads()
    yield
    _suite_threads()


def _suite_threads() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != int(TEST_THREADS):
        torch.set_num_threads(int(TEST_THREADS))


@pytest.fixture(autouse=True)
def python_signal_defaults():
    """Each test starts with Python's own SIGINT and SIGTERM handling, whatever pytest inherited.

    (A shell that starts pytest in the background without job control leaves SIGINT ignored, and an
    ignored signal is inherited by every subprocess a test starts: the stop tests would wait in vain.)
    """
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def _torch_setting() -> str:
    import torch

    return (
        f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} thread(s)"
    )


_WORKER_SETTINGS: set[str] = set()


def pytest_sessionfinish(session) -> None:
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: tell the controller
        session.config.workeroutput["torch"] = _torch_setting()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    if "torch" in getattr(node, "workeroutput", {}):
        _WORKER_SETTINGS.add(node.workeroutput["torch"])


def pytest_terminal_summary(terminalreporter) -> None:
    """Say which CPU kernels (ATEN_CPU_CAPABILITY) and how many threads the suite really ran with (in
    each pytest-xdist worker)."""
    for setting in sorted(_WORKER_SETTINGS or {_torch_setting()}):
        terminalreporter.write_line(setting)


VOCAB = 99
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    num_labels=2,
)


def tiny_config(family: str, **overrides):
    from transformers import (
        AlbertConfig,
        BertConfig,
        DebertaV2Config,
        DistilBertConfig,
        ElectraConfig,
        EuroBertConfig,
        ModernBertConfig,
        MPNetConfig,
        RobertaConfig,
        XLMRobertaConfig,
    )

    if family == "bert":
        config = BertConfig(**COMMON)
    elif family == "roberta":
        config = RobertaConfig(**COMMON, pad_token_id=1)
    elif family == "xlm-roberta":
        config = XLMRobertaConfig(**COMMON, pad_token_id=1)
    elif family == "electra":
        config = ElectraConfig(**COMMON, embedding_size=16)
    elif family == "distilbert":
        config = DistilBertConfig(
            vocab_size=VOCAB,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=37,
            max_position_embeddings=64,
            num_labels=2,
        )
    elif family == "albert":
        config = AlbertConfig(**COMMON, embedding_size=16)
    elif family == "modernbert":
        # 3 layers: global, local (a window of 2 keys each side), global; RoPE; pad id 0 as make_batch pads
        config = ModernBertConfig(
            **{k: v for k, v in COMMON.items() if k != "max_position_embeddings"},
            max_position_embeddings=64,
            local_attention=4,
            global_attn_every_n_layers=2,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
        )
        config.num_hidden_layers = 3
        config.layer_types = ["full_attention", "sliding_attention", "full_attention"]
    elif family == "eurobert":
        config = EuroBertConfig(**COMMON, pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=3)
    elif family == "deberta-v2":
        # the DeBERTa-v3 layout: relative attention with both disentangled terms, shared keys, buckets
        config = DebertaV2Config(
            **COMMON,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_buckets=8,
            max_relative_positions=16,
            position_biased_input=False,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
        )
    elif family == "mpnet":
        # relative position buckets added to the scores in MPNet's own attention code; pad id 1 (fixed)
        config = MPNetConfig(**COMMON, pad_token_id=1, relative_attention_num_buckets=32)
    else:
        raise KeyError(family)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def tiny_model(family: str = "bert", seed: int = 0, **overrides):
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_config(tiny_config(family, **overrides))


def no_dropout(family: str) -> dict:
    """Overrides that switch a family's own dropouts off, so only a method's masks remain."""
    if family == "distilbert":
        return {"dropout": 0.0, "attention_dropout": 0.0, "seq_classif_dropout": 0.0}
    if family == "modernbert":
        return {
            "attention_dropout": 0.0,
            "embedding_dropout": 0.0,
            "mlp_dropout": 0.0,
            "classifier_dropout": 0.0,
        }
    if family == "eurobert":
        return {"attention_dropout": 0.0, "classifier_dropout": 0.0}
    if family == "albert":
        return {
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "classifier_dropout_prob": 0.0,
        }
    return {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def make_batch(batch: int = 4, length: int = 12, pad_from: dict[int, int] | None = None, seed: int = 1):
    """Random ids with some rows padded from the given position: {row: first padding position}."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, start in (pad_from or {}).items():
        mask[row, start:] = 0
        ids[row, start:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 2, (batch,), generator=g)}


FAMILIES = [
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "distilbert",
    "albert",
    "modernbert",
    "eurobert",
    "deberta-v2",
    "mpnet",
]
#: families whose attention scores are reachable (AttentionInterface); DeBERTa's stay inside its forward
SCORE_FAMILIES = [f for f in FAMILIES if f != "deberta-v2"]


@pytest.fixture
def bert():
    return tiny_model("bert", **no_dropout("bert"))


WORDS = [
    "good",
    "bad",
    "great",
    "awful",
    "fine",
    "poor",
    "film",
    "plot",
    "the",
    "a",
    "was",
    "is",
    "very",
    "not",
    "actors",
    "story",
    "fun",
    "dull",
    "nice",
    "boring",
]


def save_tiny_model_dir(path, family: str = "bert", **overrides) -> str:
    """A tiny random model with a word-level BERT tokenizer, saved as a local model folder."""
    from transformers import BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    vocab += [f"w{i}" for i in range(VOCAB - len(vocab))]
    BertTokenizer(vocab={word: i for i, word in enumerate(vocab)}).save_pretrained(path)
    tiny_model(family, **overrides).save_pretrained(path)
    return str(path)


def snapshot(folder) -> dict[str, str] | None:
    """Every file under ``folder`` with the hash of its bytes (None: no folder): what a fault left."""
    import hashlib
    from pathlib import Path

    folder = Path(folder)
    if not folder.exists():
        return None
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


#: log.jsonl's timing of its training lines: measured, so never the same in two runs
TIMING = ("steps_per_s", "examples_per_s")


def log_numbers(run_dir) -> list[dict]:
    """The records of RUN_DIR/log.jsonl without their timing (:data:`TIMING`): what a resumed run and an
    uninterrupted one must agree on."""
    import json

    records = [json.loads(line) for line in (Path(run_dir) / "log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in record.items() if k not in TIMING} for record in records]


def write_sentiment_csv(path, n: int, seed: int = 0) -> str:
    """A learnable toy sentiment CSV: label 1 iff the text has more positive than negative words."""
    import random

    rng = random.Random(seed)
    pos, neg, filler = (
        ["good", "great", "fine", "fun", "nice"],
        ["bad", "awful", "poor", "dull", "boring"],
        WORDS[6:14],
    )
    lines = ["text,label"]
    for _ in range(n):
        label = rng.randint(0, 1)
        words = rng.sample(pos if label else neg, 2) + rng.sample(filler, 4)
        rng.shuffle(words)
        lines.append(f"{' '.join(words)},{label}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def make_tiny_run(folder: Path) -> dict:
    """Paths of a tiny model folder and train/dev CSVs written in ``folder`` (its ``"tmp"``)."""
    return {
        "model": save_tiny_model_dir(folder / "model"),
        "train": write_sentiment_csv(folder / "train.csv", 96, seed=0),
        "dev": write_sentiment_csv(folder / "dev.csv", 24, seed=1),
        "tmp": folder,
    }


@pytest.fixture
def tiny_run(tmp_path):
    """Paths of a tiny model folder and train/dev CSVs."""
    return make_tiny_run(tmp_path)


def toy_train_config(tiny_run, **overrides):
    """A TrainConfig of the toy task and tiny model of `tiny_run`; ``overrides`` replace any field."""
    from attendout.config import TrainConfig

    base = dict(
        task="file",
        train_file=tiny_run["train"],
        eval_files={"dev": tiny_run["dev"]},
        text_columns=["text"],
        label_column="label",
        model=tiny_run["model"],
        batch_size=16,
        max_steps=4,
        max_length=16,
        progress=False,
    )
    base.update(overrides)
    if "output_dir" not in base:  # a toy without a "tmp" folder must name its output_dir
        base["output_dir"] = str(tiny_run["tmp"] / "run")
    return TrainConfig(**base)


def toy_cli_args(tiny_run, *extra: str, output_dir=None) -> list[str]:
    """`attendout finetune` arguments for the toy task and tiny model; ``extra`` may override any of them."""
    return [
        "finetune",
        "--task", "file",
        "--train-file", tiny_run["train"],
        "--eval-file", f"dev={tiny_run['dev']}",
        "--text-columns", "text",
        "--label-column", "label",
        "--model", tiny_run["model"],
        "--batch-size", "16",
        "--max-length", "16",
        "--no-progress",
        "--output-dir", str(output_dir or tiny_run["tmp"] / "run"),
        *extra,
    ]  # fmt: skip


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """Every matplotlib Figure saved while the test runs, caught at ``savefig`` (the file is still written).

    Image tests check what was drawn (axes, lines, bars, images) through these objects, not only that a
    PNG file appeared.
    """
    from matplotlib.figure import Figure

    figures = []
    save = Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


def panels(figure) -> list:
    """The visible axes of a figure that hold data (colour bars and hidden spare panels left out)."""
    return [ax for ax in figure.axes if ax.get_visible() and (ax.lines or ax.patches or ax.images)]


@pytest.fixture
def one_thread():
    """Tiny tensors: one torch thread is faster, and much faster on a loaded machine (no oversubscription)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: each family's attention-dropout setting (those not named: ``attention_probs_dropout_prob``)
ATTENTION_DROPOUT = {
    "distilbert": "attention_dropout",
    "modernbert": "attention_dropout",
    "eurobert": "attention_dropout",
    "llama": "attention_dropout",
    "t5": "dropout_rate",
}


def outputs_on_each_drop_path(model, forward, monkeypatch, seed: int = 5) -> dict[str, tuple]:
    """``forward()``'s output and every parameter's gradient on each path that dropped scores can take,
    all under one seed: ``filled`` (in place, the CPU path when the model's attention dropout is on),
    ``sdpa`` (the drops joined to SDPA's mask) and ``explicit`` (the softmax a recorder forces). Asserts
    that the filled path really ran. ``forward`` returns a tensor; the loss is its sum against fixed
    random weights, so every position's output gets a gradient."""
    import torch

    import attendout
    from attendout.attention import paths

    taken = []
    filled = paths.filled_softmax

    def spy(*args, **kwargs):
        taken.append(True)
        return filled(*args, **kwargs)

    monkeypatch.setattr(paths, "filled_softmax", spy)
    results = {}
    for path in ("filled", "sdpa", "explicit"):
        if path == "sdpa":
            monkeypatch.setattr(paths, "fills_in_place", lambda call, dropout: False)
        model.zero_grad()
        torch.manual_seed(seed)
        if path == "explicit":
            with attendout.record_attention(model):
                out = forward()
        else:
            out = forward()
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
        (out * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[path] = (out.detach(), grads)
        if path == "filled":
            assert taken, "the filled path did not run"
    return results


def assert_same_outputs(results: dict[str, tuple]) -> None:
    """Every path's output and gradients equal the explicit path's, up to float32 rounding.

    Outputs with assert_close's float32 defaults; each gradient relative to its largest entry (1e-4 of
    it, at least 1e-6): an embedding's gradient sums every position's, the paths sum in different
    orders, and a key bias's gradient is zero but for rounding (a softmax ignores a constant per row).
    """
    import torch

    out, grads = results["explicit"]
    assert any(g.abs().max() > 0 for g in grads.values())
    for path, (other, other_grads) in results.items():
        torch.testing.assert_close(other, out, msg=lambda m, path=path: f"{path}: {m}")
        assert other_grads.keys() == grads.keys(), path
        for name, grad in grads.items():
            size = float(grad.abs().max())
            torch.testing.assert_close(
                other_grads[name],
                grad,
                rtol=1e-4,
                atol=max(1e-4 * size, 1e-6),
                msg=lambda m, n=name, p=path: f"{p} {n}: {m}",
            )


def hold_the_first_two_runs(folder: Path, monkeypatch, *, checkpointed: bool = False) -> None:
    """A sitecustomize for worker processes (``bench --jobs``, ``advise --jobs``): a run that has logged a
    training step (and with ``checkpointed``, written its first checkpoint) marks itself in ``folder`` and
    waits, once per test, at most 120 s or until it is asked to stop, until two runs have, so that neither of
    the first two can finish before both are under way, however slowly the other worker starts. A test that
    stops them waits for :func:`runs_held` first."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        f"""
import os
import time
from pathlib import Path
import attendout.run.loop as loop
from attendout.run import interrupt

_real = loop.finetune
HERE = Path({str(folder)!r})

def finetune(config, on_log=None):
    work = Path(config.output_dir)
    def waiting(record):
        if on_log is not None:
            on_log(record)
        if (HERE / "passed").exists() or (HERE / f"run-{{os.getpid()}}").exists():
            return
        if {checkpointed!r} and not (work / "checkpoint" / "state.json").exists():
            return
        (HERE / f"run-{{os.getpid()}}").write_text(str(work))
        deadline = time.time() + 120
        while time.time() < deadline and interrupt.requested() is None:
            if len(list(HERE.glob("run-*"))) >= 2:
                (HERE / "passed").write_text("")
                return
            time.sleep(0.05)
    return _real(config, waiting)

loop.finetune = finetune
"""
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), *sys.path]))


def runs_held(folder: Path) -> bool:
    """Whether two runs under :func:`hold_the_first_two_runs` are both under way (held or let go)."""
    return len(list(folder.glob("run-*"))) >= 2
