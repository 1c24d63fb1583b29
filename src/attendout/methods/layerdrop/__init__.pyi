# attendout.methods.layerdrop's public names, by module: lazy_loader.attach_stub imports each on first use.
from .config import AttnLayerDropConfig, LayerDropConfig
