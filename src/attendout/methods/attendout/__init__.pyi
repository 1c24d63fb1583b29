# attendout.methods.attendout's public names, by module: lazy_loader.attach_stub imports each on first use.
from .config import AttendOutConfig
from .game import score_gap
from .generator import (
    Generator,
    GeneratorSample,
    MovingAverageBaseline,
    gumbel_drop,
    reinforce_loss,
)
from .method import MaskSlot
from .policy import GeneratorPolicy, RunningStats, rate_log_prob
from .strategy import AttendOutStrategy, CachedAction, copy_optimizer_state
