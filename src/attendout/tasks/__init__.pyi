# attendout.tasks's public names, by module: lazy_loader.attach_stub imports each on first use.
from .base import (
    CLASSIFICATION,
    LM,
    MULTIPLE_CHOICE,
    REGRESSION,
    SEQ2SEQ,
    TOKEN_CLASSIFICATION,
    DataError,
    is_generation,
)
from .checks import check_training_splits
from .core import (
    ChoiceExamples,
    Examples,
    LoadOptions,
    Task,
    TaskData,
    TaskLoader,
    TokenExamples,
    carve_validation,
    compute_metrics,
    get_task,
    known_kinds,
    list_tasks,
    register_kind,
    register_task,
    subsample,
)
from .lm_seq2seq import Seq2SeqExamples
from .loading import DEFAULT_TASK, FILE_TASK, load_task_data
from .metrics import (
    LOWER_IS_BETTER,
    METRICS,
    accuracy,
    better,
    entity_f1,
    entity_precision,
    entity_recall,
    f1,
    higher_is_better,
    mcc,
    pearson,
    register_metric,
    spearman,
    token_accuracy,
)
from .tokens import iob1_to_iob2, read_conll
