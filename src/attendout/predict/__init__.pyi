# attendout.predict's public names, by module: lazy_loader.attach_stub imports each on first use.
from .base import (
    OUTPUT_FORMATS,
    BasePredictor,
    PredictError,
    UnfinishedRunError,
    check_finished,
    check_output_path,
    run_settings,
    run_split,
    task_from_settings,
    write_rows,
    write_rows_atomic,
)
from .classification import Predictions, Predictor, read_inputs, write_predictions
from .generative import GenerationPredictor, Generations, generation_kind, predict_main, read_sources
