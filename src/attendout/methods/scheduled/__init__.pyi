# attendout.methods.scheduled's public names, by module: lazy_loader.attach_stub imports each on first use.
from .config import ScheduledConfig
