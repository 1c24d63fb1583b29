"""attendout: fine-tune pretrained transformer encoders with regularised self-attention."""

from .attention import (
    AttentionCall,
    AttentionEdit,
    AttentionMethod,
    UnsupportedModelError,
    install,
    record_attention,
    supported_model_types,
    uninstall,
)
from .methods import (
    METHODS,
    MethodConfig,
    MethodHandle,
    apply,
    get_method_config,
    list_methods,
    register_method,
)

__version__ = "0.1.0"


def remove(model) -> None:
    """Remove every attendout method and the hook from ``model`` (it is stock again)."""
    uninstall(model)


__all__ = [
    "METHODS",
    "AttentionCall",
    "AttentionEdit",
    "AttentionMethod",
    "MethodConfig",
    "MethodHandle",
    "UnsupportedModelError",
    "__version__",
    "apply",
    "get_method_config",
    "install",
    "list_methods",
    "record_attention",
    "register_method",
    "remove",
    "supported_model_types",
    "uninstall",
]
