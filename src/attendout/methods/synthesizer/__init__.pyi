# attendout.methods.synthesizer's public names, by module: lazy_loader.attach_stub imports each on first use.
from .checkpoint import is_synthesized_checkpoint, load_model, load_synthesized, load_synthesized_weights
from .config import SynthesizerConfig
from .layer import SynthesizerLayer
from .method import (
    MODEL_TYPE,
    WEIGHTS_NAME,
    SequenceTooLongError,
    Synthesizer,
    get_synthesizer,
    save_synthesized,
    synthesize,
)
from .strategy import SynthesizerStrategy
from .variants import VARIANTS
