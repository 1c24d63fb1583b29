# attendout.models's public names, by module: lazy_loader.attach_stub imports each on first use.
from .decoders import (
    AUTO_CLASSES,
    INITS,
    SCRATCH_ARCHITECTURES,
    end_of_sequence,
    load_for_generation,
    scratch_config,
)
from .loading import ModelNotFoundError, load_for_task, packaged_model_path, resolve_model
from .offline import (
    MODELS_VARIABLE,
    OFFLINE_MODELS,
    OfflineModel,
    OfflineModelError,
    Part,
    damage,
    model_folder,
    models_home,
    not_set_up,
    offline_model,
    repair_hint,
    setup_model,
)
from .size import ScratchSize
from .tokenizer import SPECIAL_TOKENS, train_tokenizer
