"""The models a run trains: finding and loading pretrained ones, the offline set, and models from scratch.

* :mod:`.loading`: the packaged MiniLM, local folders and the hub; a checkpoint's head made to meet the task.
* :mod:`.offline`: the pretrained models that set up offline (``make models``).
* :mod:`.decoders`: decoders and encoder-decoders of the generation kinds, pretrained or from scratch.
* :mod:`.size`: the size of a model from scratch, plain data a run's config checks.
* :mod:`.tokenizer`: the byte-level BPE a model from scratch reads, trained on the task's own text.

The names of ``__init__.pyi`` are imported from their modules on first use (``lazy_loader``).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
