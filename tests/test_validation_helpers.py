"""The one JSON/UTF-8 reader and the integer predicate of ctxemb.core.validation."""

import json

import numpy as np
import pytest

from ctxemb.core.validation import CorruptFileError, check_choice, check_int, is_int, read_json_file
from ctxemb.evaluation.similarity.results import load_results_json


def test_read_json_file_reads_utf8_with_or_without_bom(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps({"naïve": [1, 2.5, None]}), encoding="utf-8")
    assert read_json_file(p) == {"naïve": [1, 2.5, None]}
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    assert read_json_file(p) == {"naïve": [1, 2.5, None]}
    p.write_text("[1, 2]", encoding="utf-8")
    assert read_json_file(p, expected=list) == [1, 2]
    assert read_json_file(p, expected=None) == [1, 2]


@pytest.mark.parametrize("content, error, match", [
    (None, FileNotFoundError, r"index manifest not found: .*m\.json"),
    (b"", CorruptFileError, r"index manifest .*m\.json is empty; expected a JSON object"),
    (b'{"a": 1', CorruptFileError, r"index manifest .*m\.json is not valid JSON \(truncated or corrupt\?\).*line 1"),
    (b'{"a": "\xe9"}', CorruptFileError, r"index manifest .*m\.json is not valid UTF-8: byte 0xe9 on line 1"),
    (b"[1]", CorruptFileError, r"index manifest .*m\.json must hold a JSON object; it holds an array"),
])
def test_read_json_file_errors_name_the_file_and_what_was_expected(tmp_path, content, error, match):
    p = tmp_path / "m.json"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(error, match=match) as info:
        read_json_file(p, "index manifest")
    if error is CorruptFileError:
        assert info.value.path == p and isinstance(info.value, ValueError)


def test_similarity_results_file_errors(tmp_path):
    p = tmp_path / "r.json"
    p.write_text('{"metadata": {}}', encoding="utf-8")
    with pytest.raises(CorruptFileError, match="not a similarity results file"):
        load_results_json(p)
    p.write_text("[]", encoding="utf-8")
    with pytest.raises(CorruptFileError, match="similarity results file .* must hold a JSON object"):
        load_results_json(p)


@pytest.mark.parametrize("value, ok", [(3, True), (np.int64(3), True), (0, True), (-2, True), (True, False),
                                       (np.bool_(True), False), (3.0, False), ("3", False), (None, False)])
def test_is_int(value, ok):
    assert is_int(value) is ok
    if ok:
        assert check_int(value, "n", low=-10) == int(value)
    else:
        with pytest.raises(TypeError, match="n must be an int"):
            check_int(value, "n", low=-10)


def test_check_choice_names_the_argument_the_choices_and_the_value():
    assert check_choice("fp32", "precision", ("fp32", "bf16")) == "fp32"
    with pytest.raises(ValueError, match=r"precision must be one of 'fp32', 'bf16'; got 'fp16'"):
        check_choice("fp16", "precision", ("fp32", "bf16"))
