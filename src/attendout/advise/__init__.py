"""``attendout advise``: which regulariser, at what strength, for a model and data; searched, confirmed.

See :mod:`attendout.advise.study` for the stages and the output folder.
"""

from .answer import Verdict, verdict
from .confirm import Confirmation, ConfirmRow
from .options import STAGES, AdviseConfig
from .plan import MethodSearch
from .regime import RegimeReading, Trend, choose_budget, read_regime, read_trend
from .spaces import DEFAULT_METHODS, SEARCH_SPACES, Range, search_space
from .study import Advice, advise

__all__ = [
    "DEFAULT_METHODS",
    "SEARCH_SPACES",
    "STAGES",
    "Trend",
    "Advice",
    "AdviseConfig",
    "ConfirmRow",
    "Confirmation",
    "MethodSearch",
    "Range",
    "RegimeReading",
    "Verdict",
    "advise",
    "choose_budget",
    "read_regime",
    "read_trend",
    "search_space",
    "verdict",
]
