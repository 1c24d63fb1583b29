"""attendout's version, in a module of its own: the package exports it, and the files a run writes
record it (config.json, manifests, saved Synthesizer models), without importing the package."""

__version__ = "0.1.0"
