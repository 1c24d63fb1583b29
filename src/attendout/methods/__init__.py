"""Attention regularisers: each a config (its options, as data) registered by name with the parts that
act on a model (:mod:`.registry`, the peft way).

Every method is a package of the same layout: ``config.py`` (the options; no torch), ``method.py`` (its
part in the attention hook) and, where the training loop must do more than a plain step, ``strategy.py``
(AD-DROP, AttendOut, Synthesizer); its ``__init__`` registers the three. Other modules hold what one
method needs beyond them (AD-DROP's attribution, AttendOut's Generator and game).
Importing this package imports the configs only: :func:`apply`, :func:`prepare` and the handles (which
need torch) are imported on first use (``lazy_loader``, the names of ``__init__.pyi``).
"""

import lazy_loader

from . import addrop, attendout, drophead, dropout, layerdrop, none, scheduled, synthesizer  # noqa: F401  (each registers its method)

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
