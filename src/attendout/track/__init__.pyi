# attendout.track's public names, by module: lazy_loader.attach_stub imports each on first use.
from .backends import BACKENDS, Backend, Opening, TrackerError, make_backend
from .tracker import RunTracker, Tracking, metrics_of, params_of, track_run
