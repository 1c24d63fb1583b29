"""Reporting runs to the trackers users already watch (``--report-to``): TensorBoard, MLflow, W&B, Trackio.

* :mod:`.tracker`: where a command's runs report (``Tracking``) and the listener of the loop that mirrors
  one run's log.jsonl into every tracker (``RunTracker``), resumes included.
* :mod:`.backends`: each tracker behind one small interface; a missing library is one line naming its
  ``pip install``.

The names of ``__init__.pyi`` are imported from their modules on first use (``lazy_loader``).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
