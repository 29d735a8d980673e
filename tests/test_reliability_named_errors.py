"""Named errors (a ragged vectors list, keys.txt one line short) and leftovers of interrupted saves cleaned by the
next save or open of the same path, with a log line, never touching a user's file."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ctxemb.search import CorruptFileError, SemanticIndex
from ctxemb.wsd.sense_store import SenseStore


@pytest.mark.parametrize("vectors, message", [
    ([[1.0, 2.0, 3.0], [1.0, 2.0]], r"vectors must be a rectangular \(N, H\) array; it is a ragged list: row 0 has "
                                    r"length 3 but row 1 has length 2"),
    ([[1.0, 2.0, 3.0], 4.0], "row 0 has length 3 but row 1 has a scalar"),
])
def test_a_ragged_list_of_vectors_names_the_row_and_lengths(vectors, message):
    index = SemanticIndex(3)
    with pytest.raises(ValueError, match=message):
        index.add(["a", "b"], vectors)
    index.add(["a"], [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"queries must be a rectangular .*row 1 has length 1"):
        index.search([[1.0, 2.0, 3.0], [1.0]])


def test_keys_txt_one_line_short_names_the_file_and_the_counts(tmp_path):
    store = SenseStore(4)
    store.add(["a%1:00:00::", "b%1:00:00::", "c%1:00:00::"], np.eye(3, 4))
    store.save(tmp_path / "s")
    keys = tmp_path / "s" / "keys.txt"
    keys.write_text("".join(keys.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(CorruptFileError, match=r"keys file .*s/keys\.txt has 2 lines \(one sense key each\), but "
                                               r".*meta\.json says n_senses=3 and .*index\.faiss holds 3 vectors"):
        SenseStore.load(tmp_path / "s")


def test_leftovers_of_interrupted_index_saves_are_removed_by_the_next_save_and_open(tmp_path, caplog):
    d = tmp_path / "ix"
    index = SemanticIndex(4).add(["a", "b"], np.eye(2, 4))
    index.save(d)
    # what a save killed before its manifest leaves: its generation's files, and an atomic write's temporary
    leftovers = ["index.000009-abcdefgh.faiss", "items.000009-abcdefgh.json", "items.000003.json",
                 ".manifest.json.999999-abcdefgh.tmp", "lists.zzzzzzzz.ivfdata"]
    mine = ["notes.txt", "index.faiss", "items.json", "index.000009-abcdefgh.faiss.bak"]  # not the library's names
    for name in leftovers + mine:
        (d / name).write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="ctxemb"):
        SemanticIndex.load(d)  # open: no writer at work, so it cleans
    assert "removed" in caplog.text and "index.000009-abcdefgh.faiss" in caplog.text
    names = {p.name for p in d.iterdir()}
    assert not names & set(leftovers) and set(mine) <= names
    (d / "items.000010-abcdefgh.json").write_bytes(b"x")
    index.save(d)  # a save cleans too
    assert "items.000010-abcdefgh.json" not in {p.name for p in d.iterdir()}
    assert set(mine) <= {p.name for p in d.iterdir()}
    assert SemanticIndex.load(d).ids == ["a", "b"]


def test_an_open_while_a_writer_holds_the_directory_leaves_its_files_alone(tmp_path):
    from ctxemb.search.storage import directory_lock

    d = tmp_path / "ix"
    SemanticIndex(4).add(["a"], np.eye(1, 4)).save(d)
    (d / "items.000002-inflight.json").write_bytes(b"being written")  # a save in progress elsewhere
    (d / "items.000002-abcdefgh.json").write_bytes(b"being written")
    with directory_lock(d).hold():
        SemanticIndex.load(d)
        assert (d / "items.000002-abcdefgh.json").exists()
    SemanticIndex.load(d)
    assert not (d / "items.000002-abcdefgh.json").exists()
