import os

import pytest

from ctxemb.core.paths import shared_data_dir

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data():
    """The shared benchmark data folder; tests that need it skip cleanly when it is absent."""
    d = shared_data_dir(required=False)
    if d is None:
        pytest.skip("shared data folder not found (set CTXEMB_DATA)")
    return d


@pytest.fixture(scope="session")
def wordnet():
    """nltk's WordNet; tests that need it skip cleanly when it cannot be found."""
    from ctxemb.wsd import wordnet as wnu

    try:
        return wnu.get_wordnet()
    except wnu.WordNetNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module (``pytestmark = pytest.mark.usefixtures("one_torch_thread")``): tiny
    matrices gain nothing from more threads, the 2 test cores are shared, and torchrun ranks run one thread each."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def quiet_machine_for_the_precision_probe(monkeypatch):
    """The auto-precision probe does not cache a choice made on a busy machine; the test machine is busy by design
    (pytest, other suites), so tests see a quiet one unless they set the load themselves."""
    from ctxemb.runtime import autoprecision

    monkeypatch.setattr(autoprecision, "_load_average", lambda: 0.0)
