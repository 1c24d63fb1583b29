# attendout.methods's public names, by module: lazy_loader.attach_stub imports each on first use.
from .addrop import ADDropConfig
from .attendout import AttendOutConfig
from .base import CombinedHandle, MethodHandle, MethodStackError, TrainingStrategy, apply, prepare
from .config import MethodConfig
from .drophead import DropHeadConfig
from .dropout import AttnDropoutConfig, ScoresDropoutConfig
from .layerdrop import AttnLayerDropConfig, LayerDropConfig
from .none import NoneConfig
from .registry import (
    METHODS,
    get_method_config,
    list_methods,
    register_method,
    settle_for_task,
    unregister_method,
)
from .scheduled import ScheduledConfig
from .synthesizer import SynthesizerConfig
