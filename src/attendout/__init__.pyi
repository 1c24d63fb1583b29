# attendout's public names, by module: lazy_loader.attach_stub imports each on first use.
from .attention import (
    AttentionCall,
    AttentionEdit,
    AttentionMethod,
    RandomDrops,
    UnsupportedModelError,
    install,
    record_attention,
    supported_model_types,
    uninstall,
)
from .configfile import load_config, save_config
from .contract import Distributed, ForwardEdits, LoopContext, StepInfo
from .core.limits import LimitError, check_length
from .methods import (
    METHODS,
    CombinedHandle,
    MethodConfig,
    MethodHandle,
    MethodStackError,
    SynthesizerConfig,
    TrainingStrategy,
    apply,
    get_method_config,
    list_methods,
    prepare,
    register_method,
    unregister_method,
)
from .methods.base import remove
from .methods.synthesizer import (
    SequenceTooLongError,
    is_synthesized_checkpoint,
    load_model,
    load_synthesized,
    save_synthesized,
    synthesize,
)
from .predict import Predictions, Predictor
from .run import Stopped
from .version import __version__
