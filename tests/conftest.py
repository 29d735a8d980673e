import os

import pytest

from ctxemb.paths import shared_data_dir

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data():
    """The shared benchmark data folder; tests that need it skip cleanly when it is absent."""
    d = shared_data_dir(required=False)
    if d is None:
        pytest.skip("shared data folder not found (set CTXEMB_DATA)")
    return d
