# attendout.attention's public names, by module: lazy_loader.attach_stub imports each on first use.
from .call import (
    AttentionCall,
    AttentionEdit,
    AttentionMethod,
    AttentionRecorder,
    CombinedEdits,
    MethodHost,
    RandomDrops,
    RateMeter,
    combine_edits,
    own_edit,
    query_rows,
    rewrites_scores,
)
from .controller import Controller, get_controller, layer_key_valid, register_route
from .families import FAMILIES, Family, UnsupportedModelError, causal_mask, is_causal, supported_model_types
from .hook import HOOK_NAME, attendout_attention, install, uninstall
from .paths import BLOCK_BYTES, allowed_keys, empty_rows, no_key_rows_zero, uniform_weights
from .recording import record_attention
