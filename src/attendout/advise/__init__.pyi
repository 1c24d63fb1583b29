# attendout.advise's public names, by module: lazy_loader.attach_stub imports each on first use.
from .answer import Verdict, verdict
from .confirm import Confirmation, ConfirmRow
from .options import STAGES, AdviseConfig
from .plan import MethodSearch
from .regime import RegimeReading, Trend, choose_budget, read_regime, read_trend
from .spaces import DEFAULT_METHODS, SEARCH_SPACES, Range, search_space
from .study import Advice, advise
