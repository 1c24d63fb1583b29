# attendout.methods.addrop's public names, by module: lazy_loader.attach_stub imports each on first use.
from .attribution import (
    Attribution,
    attribute,
    candidate_count,
    candidate_region,
    modes_restored,
    random_drops,
    sample_drops,
)
from .config import ADDropConfig
from .method import ADDrop
from .settings import (
    ALL_LAYER_TASKS,
    ATTRIBUTIONS,
    AUTHORS_DEFAULTS,
    CROSS_TUNING,
    DROPPINGS,
    ENCODER_LAYERS,
    IG_FORMS,
    RD_SAMPLINGS,
    ROUNDINGS,
    STARTS,
    TASK_LAYERS,
    TASK_SETTINGS,
    task_layers,
    task_settings,
)
from .strategy import ADDropStrategy, addrop_active
