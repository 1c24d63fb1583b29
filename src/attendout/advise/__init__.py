"""``attendout advise``: which regulariser, at what strength, for a model and data; searched, confirmed.

See :mod:`attendout.advise.study` for the stages and the output folder.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
