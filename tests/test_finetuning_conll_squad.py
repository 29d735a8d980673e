"""Token- and span-level fine-tuning readers: CoNLL columns (IOB1 -> BIO, documents, bad files, the writer) and
SQuAD-format JSON (answer checks, the split by article), on hand fixtures and the real shared files."""

from __future__ import annotations

import json
import re

import pytest

from ctxemb.tasks.token.conll import (
    NER_LABELS,
    TaggedSentence,
    iob1_to_bio,
    load_conll2003,
    pos_labels,
    read_conll,
    write_conll,
)
from ctxemb.tasks.qa.squad import QAExample, load_xquad, read_squad, split_by_article


def _write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def _names_line(excinfo, path, line: int):
    msg = str(excinfo.value)
    assert path.name in msg, msg
    assert re.search(r"\bline %d\b" % line, msg), msg


# ---- IOB1 -> BIO ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("iob1, bio", [
    (["I-ORG", "I-ORG", "O", "I-PER"], ["B-ORG", "I-ORG", "O", "B-PER"]),
    (["I-LOC", "B-LOC"], ["B-LOC", "B-LOC"]),  # two adjacent places: B- marks the second one in IOB1 already
    (["I-PER", "I-LOC", "I-LOC"], ["B-PER", "B-LOC", "I-LOC"]),  # type change starts a chunk
    (["O", "I-MISC", "B-MISC", "I-MISC", "O"], ["O", "B-MISC", "B-MISC", "I-MISC", "O"]),
    ([], []),
])
def test_iob1_to_bio(iob1, bio):
    assert iob1_to_bio(iob1) == bio
    assert iob1_to_bio(bio) == bio  # idempotent: BIO passes unchanged


def test_iob1_to_bio_rejects_bad_tags():
    with pytest.raises(ValueError, match=r"tags\[1\].*'E-PER'"):
        iob1_to_bio(["B-PER", "E-PER"])
    for bad in ("I-", "B_PER", "o", ""):
        with pytest.raises(ValueError):
            iob1_to_bio([bad])
    with pytest.raises(TypeError):
        iob1_to_bio("O")


# ---- read_conll on fixtures -----------------------------------------------------------------------------------

DOCS = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

Paris NNP B-NP I-LOC
Lyon NNP B-NP B-LOC


"""


def test_read_conll_docstart_and_iob1(tmp_path):
    path = _write(tmp_path / "docs.txt", DOCS)
    got = read_conll(path)
    assert got == [
        TaggedSentence(("EU", "rejects", "German"), ("NNP", "VBZ", "JJ"), ("B-ORG", "O", "B-MISC"), 0, "docs.txt:3"),
        TaggedSentence(("Peter", "Blackburn"), ("NNP", "NNP"), ("B-PER", "I-PER"), 0, "docs.txt:7"),
        TaggedSentence(("Paris", "Lyon"), ("NNP", "NNP"), ("B-LOC", "B-LOC"), 1, "docs.txt:12"),
    ]
    assert read_conll(path, scheme="iob1") == got
    with pytest.raises(ValueError) as e:  # IOB1 read as BIO: the first I- that starts an entity is named
        read_conll(path, scheme="bio")
    _names_line(e, path, 3)
    assert pos_labels(got) == ("JJ", "NNP", "VBZ")


def test_read_conll_documents_without_leading_docstart_and_bom_crlf(tmp_path):
    text = "A NNP I-PER\r\n\r\n-DOCSTART- -X- O\r\n\r\nB NNP I-PER\r\nC NN O\r\n"
    path = _write(tmp_path / "nodoc.txt", b"\xef\xbb\xbf" + text.encode())
    got = read_conll(path, scheme="auto")
    assert [(s.words, s.ner, s.doc, s.id) for s in got] == [
        (("A",), ("B-PER",), 0, "nodoc.txt:1"),
        (("B", "C"), ("B-PER", "O"), 1, "nodoc.txt:5"),
    ]


def test_read_conll_two_columns_and_tabs(tmp_path):
    path = _write(tmp_path / "two.tsv", "New\tB-LOC\nYork\tI-LOC\n\nhi\tO\n")
    got = read_conll(path, scheme="bio")
    assert got[0].words == ("New", "York") and got[0].ner == ("B-LOC", "I-LOC") and got[0].pos == ("-", "-")
    assert got[1].id == "two.tsv:4"


@pytest.mark.parametrize("text, line", [
    ("EU NNP B-NP B-ORG\nrejects VBZ O\n", 2),  # 3 columns after 4
    ("EU NNP B-NP B-ORG\n\nPeter NNP B-NP I-PER extra\n", 3),
    ("EU\n", 1),  # fewer than 2 columns
    ("EU NNP B-NP B-ORG\nrejects VBZ B-VP X\n", 2),  # bad tag
    ("EU NNP B-NP S-ORG\n", 1),  # IOBES is not read
    ("", 1),  # empty
    ("\n \n\n", 1),  # blank
    ("-DOCSTART- -X- -X- O\n\n", 1),  # no sentence
])
def test_read_conll_bad_files_name_file_and_line(tmp_path, text, line):
    path = _write(tmp_path / "bad.conll", text)
    with pytest.raises(ValueError) as e:
        read_conll(path)
    _names_line(e, path, line)


def test_read_conll_errors_missing_file_non_utf8_and_bad_scheme(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.conll"):
        read_conll(tmp_path / "nowhere.conll")
    path = _write(tmp_path / "latin.conll", "EU NNP O\n\nCaf\xe9 NN O\n".encode("latin-1"))
    with pytest.raises(ValueError) as e:
        read_conll(path)
    _names_line(e, path, 3)
    with pytest.raises(ValueError, match="scheme"):
        read_conll(path, scheme="iob2")


def test_write_conll_round_trip(tmp_path):
    words = [["EU", "rejects", "German"], ["Peter", "Blackburn"]]
    pos = [["NNP", "VBZ", "JJ"], ["NNP", "NNP"]]
    ner = [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"]]
    path = tmp_path / "out" / "pred.conll"
    write_conll(path, words, [pos, ner])
    assert path.read_text(encoding="utf-8") == (
        "EU NNP B-ORG\nrejects VBZ O\nGerman JJ B-MISC\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n\n")
    back = read_conll(path, scheme="bio")
    assert [list(s.words) for s in back] == words
    assert [list(s.pos) for s in back] == pos and [list(s.ner) for s in back] == ner
    write_conll(path, [["a"]], [[["O"]]])  # overwrite in place, no temporary file left behind
    assert read_conll(path)[0].words == ("a",)
    assert sorted(p.name for p in path.parent.iterdir()) == ["pred.conll"]


@pytest.mark.parametrize("words, columns, match", [
    ([["a", "b"]], [[["O"]]], r"columns\[0\]\[0\] has 1 tags"),
    ([["a"]], [[["O"], ["O"]]], r"columns\[0\] has 2 sentences"),
    ([["a b"]], [[["O"]]], "whitespace"),
    ([["a"]], [[["B PER"]]], "whitespace"),
    ([[]], [[[]]], "empty"),
    ([["a"]], [], "at least one tag column"),
    ([["-DOCSTART-"]], [[["O"]]], "document start"),
])
def test_write_conll_rejects_bad_input(tmp_path, words, columns, match):
    path = tmp_path / "x.conll"
    with pytest.raises(ValueError, match=match):
        write_conll(path, words, columns)
    assert not path.exists()


def test_load_conll2003_root_and_held_back_test(tmp_path):
    _write(tmp_path / "eng.train", "EU NNP B-NP I-ORG\n")
    got = load_conll2003(root=tmp_path)
    assert list(got) == ["train"] and got["train"][0].ner == ("B-ORG",)
    with pytest.raises(FileNotFoundError, match=r"held back.*root="):
        load_conll2003(root=tmp_path, splits=["test"])
    with pytest.raises(ValueError, match="split"):
        load_conll2003(root=tmp_path, splits=["validation"])
    _write(tmp_path / "eng.testa", "EU NNP B-NP I-ORG\n\nX NN O I-FOO\n")
    with pytest.raises(ValueError) as e:  # not a CoNLL-2003 type
        load_conll2003(root=tmp_path, splits=["dev"])
    _names_line(e, tmp_path / "eng.testa", 3)


# ---- the real CoNLL-2003 files --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conll(shared_data):
    try:
        return load_conll2003()
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_real_conll2003(conll):
    assert {k: len(v) for k, v in conll.items()} == {"train": 14041, "dev": 3250}
    first = conll["train"][0]
    assert first.words[:3] == ("EU", "rejects", "German") and first.ner[:3] == ("B-ORG", "O", "B-MISC")
    assert first.id == "eng.train:1" and first.doc == 0
    tags = {t for split in conll.values() for s in split for t in s.ner}
    assert tags == set(NER_LABELS)
    assert all(len(s.words) == len(s.pos) == len(s.ner) for split in conll.values() for s in split)
    labels = pos_labels(conll["train"])
    assert len(labels) == 45 and labels == tuple(sorted(labels)) and "NNP" in labels
    assert set(pos_labels(conll["dev"])) <= set(labels)


# ---- SQuAD ---------------------------------------------------------------------------------------------------


def _squad(start=4, qid="q2", extra_qa=None):
    qas = [{"id": "q1", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 0}]},
           {"id": qid, "question": " Where? ", "answers": [{"text": "London", "answer_start": start}]}]
    if extra_qa is not None:
        qas.append(extra_qa)
    return {"version": "1.1", "data": [
        {"title": "Ada", "paragraphs": [{"context": "Ada London", "qas": qas}]},
        {"title": "Bob", "paragraphs": [{"context": "Bob was here.", "qas": [
            {"id": "q3", "question": "Who was here?", "answers": [
                {"text": "Bob", "answer_start": 0}, {"text": "Bob", "answer_start": 0}]}]}]},
    ]}


def test_read_squad_fixture(tmp_path):
    path = _write(tmp_path / "s.json", b"\xef\xbb\xbf" + json.dumps(_squad()).encode())
    got = read_squad(path)
    assert got[1] == QAExample("q2", "Ada", "Ada London", " Where? ", (("London", 4),))  # texts kept as written
    assert got[2].answers == (("Bob", 0), ("Bob", 0))  # annotators' duplicates kept
    assert [e.id for e in got] == ["q1", "q2", "q3"]


def test_read_squad_wrong_answer_start_names_the_id(tmp_path):
    path = _write(tmp_path / "s.json", json.dumps(_squad(start=3, qid="5733be284776f41900661182")))
    with pytest.raises(ValueError, match=r"s\.json.*5733be284776f41900661182.*'London'"):
        read_squad(path)


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d["data"][1]["paragraphs"][0]["qas"][0].pop("question"), r"data\[1\]\.paragraphs\[0\]\.qas\[0\]"),
    (lambda d: d["data"][0]["paragraphs"][0].pop("context"), r"data\[0\]\.paragraphs\[0\]"),
    (lambda d: d["data"][1].pop("title"), r"data\[1\]"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start="0"),
     r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\]\.answer_start"),
    (lambda d: d.pop("data"), "top level"),
])
def test_read_squad_bad_structure_names_json_path(tmp_path, mutate, where):
    doc = _squad()
    mutate(doc)
    path = _write(tmp_path / "s.json", json.dumps(doc))
    with pytest.raises(ValueError, match=r"s\.json.*" + where):
        read_squad(path)


def test_read_squad_duplicate_id_invalid_json_and_empty(tmp_path):
    dup = {"id": "q1", "question": "Again?", "answers": []}
    path = _write(tmp_path / "s.json", json.dumps(_squad(extra_qa=dup)))
    with pytest.raises(ValueError, match=r"'q1' repeats the id of data\[0\]\.paragraphs\[0\]\.qas\[0\]"):
        read_squad(path)
    path = _write(tmp_path / "broken.json", '{"data": [\n{"title": "x",\n}')
    with pytest.raises(ValueError) as e:
        read_squad(path)
    _names_line(e, path, 3)
    path = _write(tmp_path / "empty.json", "")
    with pytest.raises(ValueError) as e:
        read_squad(path)
    _names_line(e, path, 1)
    with pytest.raises(FileNotFoundError):
        read_squad(tmp_path / "missing.json")


def _examples(n_titles: int, per_title: int = 2):
    return [QAExample("%d-%d" % (t, q), "T%d" % t, "passage %d" % t, "q?", (("passage", 0),))
            for t in range(n_titles) for q in range(per_title)]


def test_split_by_article():
    examples = _examples(8)
    train, held = split_by_article(examples, eval_fraction=0.25, seed=3)
    assert len({e.title for e in held}) == 2 and len({e.title for e in train}) == 6
    assert not {e.title for e in train} & {e.title for e in held}
    assert not {e.context for e in train} & {e.context for e in held}
    assert sorted(train + held, key=examples.index) == examples
    assert train == [e for e in examples if e in train]  # input order kept
    assert split_by_article(examples, seed=3) == (train, held)  # deterministic for a seed
    assert len({tuple(e.title for e in split_by_article(examples, seed=s)[1]) for s in range(10)}) > 1
    with pytest.raises(ValueError, match="at least one article"):
        split_by_article(_examples(1))
    with pytest.raises(ValueError, match="at least one article"):
        split_by_article(_examples(3), eval_fraction=0.1)
    with pytest.raises(ValueError, match="eval_fraction"):
        split_by_article(examples, eval_fraction=1.0)
    shared = examples + [QAExample("x", "Other", "passage 0", "q?", ())]
    with pytest.raises(ValueError, match="both sides"):
        split_by_article(shared)


# ---- the real XQuAD-en file -----------------------------------------------------------------------------------


def test_real_xquad(shared_data):
    try:
        examples = load_xquad()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert len(examples) == 1190 and len({e.id for e in examples}) == 1190
    assert len({e.title for e in examples}) == 48 and len({e.context for e in examples}) == 240
    assert all(len(e.answers) == 1 for e in examples)
    for e in examples:
        for text, start in e.answers:
            assert e.context[start:start + len(text)] == text
    train, held = split_by_article(examples)
    assert len({e.title for e in train}) == 36 and len({e.title for e in held}) == 12
    assert not {e.context for e in train} & {e.context for e in held}
    assert split_by_article(examples) == (train, held)


def test_fixed_xquad_article_split():
    from ctxemb.tasks.qa.squad import XQUAD_ARTICLE_SPLIT, xquad_split
    examples = load_xquad()
    parts = {p: xquad_split(p, examples) for p in XQUAD_ARTICLE_SPLIT}
    assert [len(parts[p]) for p in ("train", "dev", "heldout")] == [713, 126, 351]
    titles = [{e.title for e in parts[p]} for p in parts]
    assert sum(map(len, titles)) == 48 and not (titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2])
    contexts = [{e.context for e in parts[p]} for p in parts]
    assert not (contexts[0] & contexts[2] or contexts[1] & contexts[2] or contexts[0] & contexts[1])
    # the held-out twelve are the eval quarter of the seeded split used before
    assert {e.id for e in parts["heldout"]} == {e.id for e in split_by_article(examples)[1]}
    with pytest.raises(ValueError, match="part must be one of"):
        xquad_split("test", examples)
    with pytest.raises(ValueError, match="does not list"):
        xquad_split("dev", _examples(2))
