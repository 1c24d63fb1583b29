"""AD-DROP's settings as data: the values each option takes, and what the authors run per task.

* the option vocabularies (:data:`ATTRIBUTIONS`, :data:`CROSS_TUNING`, ...);
* :func:`task_layers`: the layers ``layers="task"`` stands for on a task (the authors' choice per task;
  the encoder's self-attention for ``seq2seq``, every layer for ``lm``);
* :func:`task_settings`: p, q and the attribution an unset option takes on a task (the authors' script
  for the task where it states one, else the argparse defaults of their ``main.py``).

No torch: :class:`~attendout.methods.addrop.config.ADDropConfig` is made from these alone.
"""

from __future__ import annotations

from typing import Any

ATTRIBUTIONS = ("ga", "iga", "aa", "rd")
ROUNDINGS = ("ceil", "round")
IG_FORMS = ("authors", "textbook")
#: which keys of a row are the candidates: those of highest attribution (the method) or of lowest (the
#: authors' ``--dropping_method low`` ablation)
DROPPINGS = ("high", "low")
#: how the random control draws its drops: ``authors`` (each key dropped with probability p times q,
#: their ``generate_mask_random``) or ``exact`` (ceil(p n) random candidates per row, each dropped with
#: probability q: attendout's form before issue 50)
RD_SAMPLINGS = ("authors", "exact")
#: cross-tuning: phases of plain fine-tuning and AD-DROP alternate by epoch or by step, or never
CROSS_TUNING = ("epoch", "step", "off")
#: which phase comes first
STARTS = ("finetune", "addrop")

#: ``layers="task"``: the layers come from the task (see :func:`task_layers`)
TASK_LAYERS = "task"
#: ``layers="encoder"``: every self-attention layer of an encoder-decoder's encoder (seq2seq's default)
ENCODER_LAYERS = "encoder"
#: Tasks whose search script in the authors' code (TaoYang225/AD-DROP, ``<task>/run_addrop.sh``) sets
#: ``MASK_LAYERS`` to every layer; every other script (SST-2, STS-B, QNLI, QQP, MNLI) sets "0", as
#: does the ``--mask_layers`` default of their ``main.py``.
ALL_LAYER_TASKS = frozenset({"cola", "mrpc", "rte", "conll2003"})

#: p, q and attribution where neither the user nor the task's script sets them: the argparse defaults of
#: the authors' ``main.py`` (``--p_rate 0.3``, ``--q_rate 0.2``, ``--attribution GA``; lines 49-52 of
#: ``cola/main.py`` and of every GLUE task's ``main.py`` in TaoYang225/AD-DROP).
AUTHORS_DEFAULTS: dict[str, Any] = {"p": 0.3, "q": 0.2, "attribution": "ga"}

#: What the authors' scripts state for a task, where it differs from :data:`AUTHORS_DEFAULTS`
#: (TaoYang225/AD-DROP at 4b1503c). Their GLUE scripts (``<task>/run_addrop.sh``) state no (p, q): they
#: search the 9 x 9 grid p, q in 0.1..0.9 per task (lines 23-25), and their NER and translation
#: scripts give one setting each. Their ``g_dropout`` is p and ``keep_rate`` is 1 - q
#: (``generate_mask_rev`` in ``*/self_transformers/addrop_utils.py``: the candidates are the
#: n - floor((1 - g_dropout) n) keys of highest attribution, each kept with probability keep_rate).
TASK_SETTINGS: dict[str, dict[str, Any]] = {
    # ner/main.py lines 80-81: g_dropout=0.8, keep_rate=0.9 (every layer, gradient attribution)
    "conll2003": {"p": 0.8, "q": 0.1},
    # mrpc/run_addrop.sh line 16: ATTR=IGA (p and q: the 9 x 9 grid)
    "mrpc": {"attribution": "iga"},
    # translation/main_en_ro_mt_cut.py lines 95-96: g_dropout=0.2, keep_rate=0.8
    "wmt16-en-ro": {"p": 0.2, "q": 0.2},
}


def task_layers(task: str | None, kind: str | None = None) -> list[int] | str | None:
    """The layers AD-DROP takes on ``task`` (a task name) of ``kind`` (looked up by name if not given).

    Classification: the authors' search scripts, None (every layer) for CoLA, MRPC and RTE, ``[0]`` for
    any other task or none (see :data:`ALL_LAYER_TASKS`). ``seq2seq``: ``"encoder"``, every layer of the
    encoder's self-attention, as the authors' OPUS-MT trainer. ``lm``: None, every layer (our choice:
    the authors have no language-model run; a causal LM's one stack plays the part of their encoder).
    """
    kind = kind if kind is not None else getattr(_registered(task), "kind", None)
    if kind == "seq2seq":
        return ENCODER_LAYERS
    if kind == "lm":
        return None
    return None if task in ALL_LAYER_TASKS else [0]


def task_settings(task: str | None) -> dict[str, Any]:
    """p, q and attribution on ``task`` (a task name; None: no task), as the authors run it.

    The task's own script where it states a value (:data:`TASK_SETTINGS`: CoNLL-2003 p 0.8 and q 0.1,
    MRPC integrated gradients, WMT16 en-ro p 0.2 and q 0.2), else the defaults of their ``main.py``
    (:data:`AUTHORS_DEFAULTS`: p 0.3, q 0.2, gradient attribution).
    """
    return {**AUTHORS_DEFAULTS, **TASK_SETTINGS.get(getattr(_registered(task), "name", task) or "", {})}


def _registered(task: str | None) -> Any:
    """The registered task named ``task`` (names resolve as :func:`get_task` resolves them), or None."""
    if task is None:
        return None
    from ...tasks import get_task

    try:
        return get_task(task)
    except (KeyError, ValueError):
        return None
