"""Models named as on the Hugging Face Hub (``org/name``, issue #46): fetched through huggingface_hub from a Hub
endpoint (here a small server on the loopback address that serves model directories), then read from the cache
offline; local directories and shipped names first; clear errors offline and when the Hub cannot be reached.

The server implements what ``huggingface_hub.snapshot_download`` asks for: the repository info
(``/api/models/{repo}/revision/{rev}``: the commit and the file list), the recursive file listing
(``/api/models/{repo}/tree/{rev}``) and the files (``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` with the
``X-Repo-Commit``, ``ETag`` and ``Content-Length`` headers), with the ``X-Error-Code`` headers of a missing
repository, revision or file.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
import torch

from ctxemb import Embedder
from ctxemb.modeling.loading import load_model
from ctxemb.models.hub import HUB_FILES, hub_cache_dir, resolve_model_dir
from tests.helpers import write_tiny_model

hf_constants = pytest.importorskip("huggingface_hub.constants")

TEXTS = ["the river bank", "she sat on a money plant near old houses"]


class HubServer:
    """A Hub endpoint on 127.0.0.1 serving ``{repo_id: directory}``, one commit per repository (its ``main``)."""

    def __init__(self, repos: dict[str, Path]):
        self.files = {rid: {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}
                      for rid, d in repos.items()}
        self.commits = {rid: hashlib.sha1(rid.encode()).hexdigest() for rid in repos}
        self.requests: list[tuple[str, str]] = []  # (method, path)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        if self.thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self.thread.join()

    def fetched(self, repo_id: str) -> set[str]:
        """The files of ``repo_id`` downloaded (GET) so far."""
        prefix = f"/{repo_id}/resolve/"
        return {unquote(p[len(prefix):]).split("/", 1)[1] for m, p in self.requests
                if m == "GET" and p.startswith(prefix)}

    def _answer(self, h: BaseHTTPRequestHandler, body: bool):
        path = urlsplit(h.path).path
        self.requests.append((h.command, path))
        route = (re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
                 or re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
                 or re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path))
        if route is None:
            return self._send(h, 404, b"{}", {}, body)
        repo_id, revision = route.group(1), unquote(route.group(2) or "main")
        if repo_id not in self.files:
            return self._send(h, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, body)
        commit, files = self.commits[repo_id], self.files[repo_id]
        if revision not in ("main", commit):
            return self._send(h, 404, b'{"error": "Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"}, body)
        if "/resolve/" in path:
            name = unquote(route.group(3))
            if name not in files:
                return self._send(h, 404, b'{"error": "Entry not found"}',
                                  {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}, body)
            return self._send(h, 200, files[name], {"X-Repo-Commit": commit, "ETag": f'"{_blob_id(files[name])}"',
                                                    "Content-Type": "application/octet-stream"}, body)
        if "/tree/" in path:
            folders = sorted({str(Path(n).parent) for n in files} - {"."})
            listing = ([{"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "path": f} for f in folders]
                       + [{"type": "file", "oid": _blob_id(data), "size": len(data), "path": n}
                          for n, data in files.items()])
            return self._send(h, 200, json.dumps(listing).encode(), {"Content-Type": "application/json"}, body)
        info = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                "siblings": [{"rfilename": n} for n in files]}
        return self._send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict, body: bool):
        h.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(data))}.items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _to_bin(folder: Path):
    """Replace a folder's model.safetensors by the same tensors as pytorch_model.bin."""
    from safetensors.torch import load_file

    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The directories the Hub serves: a plain model (with files ctxemb does not read), a sentence-transformers
    model (a WeightedLayerPooling with weights, a Pooling, a Normalize) and that model with .bin weights only."""
    root = tmp_path_factory.mktemp("hub-models")
    plain = write_tiny_model(root / "plain", num_hidden_layers=4)
    torch.save({"unused": torch.zeros(1)}, plain / "pytorch_model.bin")  # beside model.safetensors: never fetched
    (plain / "README.md").write_text("# tiny\n")
    (plain / "onnx").mkdir()
    (plain / "onnx" / "model.onnx").write_bytes(b"\0" * 64)
    (plain / "onnx" / "config.json").write_text("{}")
    st = Embedder.from_pretrained(plain).save_pretrained(root / "st", normalize=True)
    bin_only = Path(shutil.copytree(st, root / "bin-only"))
    _to_bin(bin_only)
    _to_bin(bin_only / "1_WeightedLayerPooling")
    return {"tiny-org/tiny-model": plain, "tiny-org/st-model": st, "tiny-org/bin-only": bin_only}


@pytest.fixture
def hub(models, tmp_path, monkeypatch):
    """The server, with HF_ENDPOINT pointing at it, an empty cache, short timeouts, online, and a working directory
    that holds no model. huggingface_hub reads its constants at import: the ones read later are patched too."""
    server = HubServer(models)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    for var in ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"):
        monkeypatch.setenv(var, "5")
        monkeypatch.setattr(hf_constants, var, 5)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    yield server
    server.stop()


def _same_vectors(a: Embedder, b: Embedder):
    np.testing.assert_allclose(np.asarray(a.embed_sentences(TEXTS)), np.asarray(b.embed_sentences(TEXTS)),
                               rtol=0, atol=1e-6)


def test_hub_name_loads_from_the_endpoint_then_offline_from_the_cache(hub, models, tmp_path, monkeypatch):
    remote = Embedder.from_pretrained("tiny-org/tiny-model")
    _same_vectors(remote, Embedder.from_pretrained(models["tiny-org/tiny-model"]))
    snapshot = resolve_model_dir("tiny-org/tiny-model")
    commit = hub.commits["tiny-org/tiny-model"]
    assert snapshot == hub_cache_dir() / "models--tiny-org--tiny-model" / "snapshots" / commit
    assert hub_cache_dir() == tmp_path / "hf-cache"
    # only what ctxemb reads: no pytorch_model.bin beside model.safetensors, no README, no onnx folder
    assert hub.fetched("tiny-org/tiny-model") == {"config.json", "model.safetensors", "vocab.txt"}

    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asked = len(hub.requests)
    _same_vectors(Embedder.from_pretrained("tiny-org/tiny-model"), remote)
    assert resolve_model_dir("tiny-org/tiny-model") == snapshot
    assert len(hub.requests) == asked

    with pytest.raises(FileNotFoundError) as e:
        resolve_model_dir("tiny-org/not-cached")
    msg = str(e.value)
    assert "'tiny-org/not-cached'" in msg and str(tmp_path / "hf-cache") in msg
    assert "offline mode is on (HF_HUB_OFFLINE=1)" in msg and "models--tiny-org--not-cached" in msg
    assert "the shipped names" in msg and str(tmp_path / "cwd" / "tiny-org" / "not-cached") in msg


def test_sentence_transformers_modules_and_bin_only_weights(hub, models, monkeypatch):
    st = Embedder.from_pretrained("tiny-org/st-model")
    assert st.sentence_modules is not None and st.sentence_modules.normalize
    _same_vectors(st, Embedder.from_pretrained(models["tiny-org/st-model"]))
    assert hub.fetched("tiny-org/st-model") == {
        "config.json", "model.safetensors", "vocab.txt", "modules.json", "sentence_bert_config.json",
        "config_sentence_transformers.json", "2_Pooling/config.json", "1_WeightedLayerPooling/config.json",
        "1_WeightedLayerPooling/model.safetensors"}

    bin_only = Embedder.from_pretrained("tiny-org/bin-only")  # .bin fetched where no model.safetensors is
    _same_vectors(bin_only, st)
    assert {"pytorch_model.bin", "1_WeightedLayerPooling/pytorch_model.bin"} <= hub.fetched("tiny-org/bin-only")

    hub.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _same_vectors(Embedder.from_pretrained("tiny-org/bin-only"), st)
    _same_vectors(Embedder.from_pretrained("tiny-org/st-model"), st)


def test_revisions(hub, monkeypatch):
    commit = hub.commits["tiny-org/tiny-model"]
    pinned = resolve_model_dir(f"tiny-org/tiny-model@{commit}")
    assert pinned.name == commit
    assert load_model("tiny-org/tiny-model", revision="main").model_dir == pinned
    with pytest.raises(FileNotFoundError, match="has no revision 'v9' of tiny-org/tiny-model"):
        resolve_model_dir("tiny-org/tiny-model@v9")
    with pytest.raises(ValueError, match="names revision 'main' but revision='v2'"):
        resolve_model_dir("tiny-org/tiny-model@main", revision="v2")
    with pytest.raises(ValueError, match="not a model named as on the Hugging Face Hub"):
        resolve_model_dir("tiny-model", revision="main")

    hub.stop()  # offline, a branch resolves through the ref the download recorded, a commit directly
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_dir("tiny-org/tiny-model", revision="main") == pinned
    assert resolve_model_dir(f"tiny-org/tiny-model@{commit}") == pinned


def test_local_files_only_reads_the_cache_alone(hub):
    with pytest.raises(FileNotFoundError, match=r"offline mode is on \(local_files_only=True\)"):
        load_model("tiny-org/tiny-model", local_files_only=True)
    assert hub.requests == []
    fetched = resolve_model_dir("tiny-org/tiny-model")
    assert resolve_model_dir("tiny-org/tiny-model", local_files_only=True) == fetched


def test_unreachable_hub_fails_fast_and_clearly_or_falls_back_to_the_cache(hub):
    cached = resolve_model_dir("tiny-org/tiny-model")
    hub.stop()
    start = time.monotonic()
    with pytest.raises(FileNotFoundError) as e:
        resolve_model_dir("tiny-org/st-model")
    assert time.monotonic() - start < 30
    msg = str(e.value)
    assert "'tiny-org/st-model'" in msg and f"could not be fetched from the Hugging Face Hub at {hub.url}" in msg
    assert "ConnectError" in msg or "Connection" in msg
    assert "holds no snapshot of it" in msg and "HF_HUB_OFFLINE=1" in msg
    assert resolve_model_dir("tiny-org/tiny-model") == cached  # the Hub gone, the cached snapshot serves


def test_a_hub_that_never_answers_times_out(hub, monkeypatch):
    """An endpoint that accepts connections and never answers: the wait is HF_HUB_ETAG_TIMEOUT, not forever
    (huggingface_hub asks for the repository info without a timeout)."""
    cached = resolve_model_dir("tiny-org/tiny-model")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
        start = time.monotonic()
        with pytest.raises(FileNotFoundError, match=r"could not be fetched .*Timeout"):
            resolve_model_dir("tiny-org/st-model")
        assert resolve_model_dir("tiny-org/tiny-model") == cached
        assert time.monotonic() - start < 20


def test_unknown_repository_names_the_hub(hub):
    with pytest.raises(FileNotFoundError) as e:
        resolve_model_dir("tiny-org/nothing")
    msg = str(e.value)
    assert "has no repository tiny-org/nothing" in msg and hub.url in msg and "HF_TOKEN" in msg


def test_a_local_directory_named_like_a_hub_model_wins(hub, tmp_path):
    local = write_tiny_model(tmp_path / "cwd" / "tiny-org" / "tiny-model", seed=1, num_hidden_layers=4)
    assert resolve_model_dir("tiny-org/tiny-model") == Path("tiny-org/tiny-model")
    _same_vectors(Embedder.from_pretrained("tiny-org/tiny-model"), Embedder.from_pretrained(local))
    assert hub.requests == []
    with pytest.raises(ValueError, match="a revision applies to a model named as on the Hugging Face Hub"):
        resolve_model_dir("tiny-org/tiny-model", revision="main")


def test_shipped_names_never_ask_the_hub(hub):
    resolve_model_dir("sentence-transformers/all-MiniLM-L6-v2")
    assert hub.requests == []


def test_the_allow_patterns_cover_the_module_folders():
    from fnmatch import fnmatch

    wanted = ["config.json", "tokenizer.json", "1_Pooling/config.json", "2_Dense/model.safetensors",
              "0_Transformer/sentence_bert_config.json", "sentence_xlm-roberta_config.json"]
    unwanted = ["pytorch_model.bin", "README.md", "onnx/model.onnx", "onnx/config.json", "flax_model.msgpack"]
    assert all(any(fnmatch(f, p) for p in HUB_FILES) for f in wanted)
    assert not [f for f in unwanted if any(fnmatch(f, p) for p in HUB_FILES)]
