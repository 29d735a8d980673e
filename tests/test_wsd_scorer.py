"""The WSD scorer against the framework's Scorer.java (compiled and run with javac/java when available)."""

import math
import shutil
import subprocess

import numpy as np
import pytest

from ctxemb.metrics.wsd import WSDScore, read_key_file, score, score_by_pos, score_files, write_key_file

HARNESS = """
import java.io.File;
public class ScoreHarness {
    public static void main(String[] args) throws Exception {
        for (int i = 1; i < args.length; i++) {
            Double[] m = Scorer.score(new File(args[0]), new File(args[i]));
            System.out.println(Double.toString(m[0]) + " " + Double.toString(m[1]) + " " + Double.toString(m[2]));
        }
    }
}
"""


def _java_double(s: str) -> float:
    return float("nan") if s == "NaN" else float(s)


def _system_answers(gold: dict, seed: int) -> list[str]:
    """Key-file lines mixing right, wrong, missing, multi-key, duplicate and unknown-id answers."""
    rng = np.random.default_rng(seed)
    all_keys = sorted({k for ks in gold.values() for k in ks})
    lines = []
    for iid, keys in gold.items():
        r = rng.random()
        wrong = all_keys[int(rng.integers(len(all_keys)))]
        if r < 0.45:
            lines.append("%s %s" % (iid, keys[0]))  # right
        elif r < 0.65:
            lines.append("%s %s" % (iid, wrong))  # (probably) wrong
        elif r < 0.75:
            continue  # missing
        elif r < 0.85:
            lines.append("%s %s %s" % (iid, keys[0], wrong))  # half right
        elif r < 0.90:
            lines.append("%s %s %s %s" % (iid, wrong, keys[-1], all_keys[0]))  # a third right
        elif r < 0.95:
            lines.append("%s %s" % (iid, keys[0]))
            lines.append("%s %s" % (iid, wrong))  # the same id twice: answers merge
        else:
            lines.append("%s %s %s" % (iid, keys[0], keys[0]))  # duplicate answer counts once
    lines.append("no.such.instance somekey%1:00:00::")
    lines.append("incomplete_line")
    return lines


@pytest.fixture(scope="module")
def semeval_gold_path(shared_data):
    p = shared_data / "wsd" / "WSD_Evaluation_Framework" / "Evaluation_Datasets" / "semeval2007" / "semeval2007.gold.key.txt"
    if not p.is_file():
        pytest.skip("semeval2007 gold keys not found")
    return p


@pytest.fixture(scope="module")
def java_scorer(tmp_path_factory, shared_data):
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("javac/java not available")
    src = shared_data / "wsd" / "WSD_Evaluation_Framework" / "Evaluation_Datasets" / "Scorer.java"
    if not src.is_file():
        pytest.skip("Scorer.java not found")
    d = tmp_path_factory.mktemp("java_scorer")
    shutil.copy(src, d / "Scorer.java")
    (d / "ScoreHarness.java").write_text(HARNESS)
    subprocess.run(["javac", "Scorer.java", "ScoreHarness.java"], cwd=d, check=True, capture_output=True, timeout=120)
    return d


def test_scores_match_scorer_java(java_scorer, semeval_gold_path, tmp_path):
    gold = read_key_file(semeval_gold_path)
    gold_ordered = {k: sorted(v) for k, v in gold.items()}
    systems = []
    for seed in range(4):
        p = tmp_path / ("sys%d.key" % seed)
        p.write_text("\n".join(_system_answers(gold_ordered, seed)) + "\n")
        systems.append(p)
    perfect = tmp_path / "perfect.key"
    write_key_file({k: v[0] for k, v in gold_ordered.items()}, perfect)
    empty = tmp_path / "empty.key"
    empty.write_text("")
    allwrong = tmp_path / "allwrong.key"
    allwrong.write_text("".join("%s wrong%%1:00:00::\n" % k for k in gold))
    systems += [perfect, empty, allwrong]

    out = subprocess.run(
        ["java", "-cp", str(java_scorer), "ScoreHarness", str(semeval_gold_path)] + [str(s) for s in systems],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout.split("\n")
    java = [[_java_double(x) for x in line.split()] for line in out if line.strip() and not line.startswith("line")]
    assert len(java) == len(systems)
    for path, (jp, jr, jf) in zip(systems, java):
        ours = score_files(semeval_gold_path, path)
        for a, b in ((ours.precision, jp), (ours.recall, jr), (ours.f1, jf)):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15), path.name
        # and the printed lines of Scorer's main()
        main_out = subprocess.run(
            ["java", "-cp", str(java_scorer), "Scorer", str(semeval_gold_path), str(path)],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout
        printed = "".join(l + "\n" for l in main_out.splitlines() if l[:2] in ("P=", "R=", "F1"))
        assert printed == ours.java_lines(), path.name
    assert score_files(semeval_gold_path, perfect).f1 == 1.0


def test_score_rules_by_hand():
    gold = {"a": ["x"], "b": ["y", "z"], "c": ["w"], "d": ["v"]}
    system = {"a": "x", "b": ["y", "q"], "c": "nope", "e": "x"}  # d missing, e unknown
    s = score(gold, system)
    # correct = 1 + 0.5 = 1.5; wrong = 0.5 + 1 = 1.5
    assert s.correct == 1.5 and s.n_answered == 3 and s.n_gold == 4
    assert s.precision == 0.5 and s.recall == 1.5 / 4
    assert s.f1 == pytest.approx(2 * 0.5 * 0.375 / 0.875)
    nothing = score(gold, {})
    assert math.isnan(nothing.precision) and nothing.recall == 0.0 and math.isnan(nothing.f1)
    zero = score(gold, {"a": "bad"})
    assert zero.precision == 0.0 and zero.recall == 0.0 and zero.f1 == 0.0
    assert zero.java_lines() == "P=\t0.0%\nR=\t0.0%\nF1=\t0.0%\n"
    assert nothing.java_lines().startswith("P=\tNaN%")


def test_java_rounding_is_half_up():
    s = WSDScore(0.0625, 0.00125, 0.5, 1, 1, 1.0)  # 6.25 -> 6.3 and 0.125 -> 0.1 under HALF_UP of the shortest repr
    assert s.java_lines() == "P=\t6.3%\nR=\t0.1%\nF1=\t50.0%\n"


def test_score_by_pos():
    gold = {"a": ["x"], "b": ["y"], "c": ["z"]}
    pos = {"a": "NOUN", "b": "NOUN", "c": "VERB"}
    by = score_by_pos(gold, {"a": "x", "b": "no", "c": "z"}, pos)
    assert list(by) == ["NOUN", "VERB"]
    assert by["NOUN"].f1 == 0.5 and by["NOUN"].n_gold == 2
    assert by["VERB"].f1 == 1.0


def test_key_file_reader_follows_java_rules(tmp_path, caplog):
    p = tmp_path / "k"
    p.write_text("a x y\r\nb  z\nc\nd w \n\na q\n")
    keys = read_key_file(p)
    assert keys == {"a": {"x", "y", "q"}, "b": {"", "z"}, "d": {"w"}}
    assert "not complete" in caplog.text


def test_key_file_writer(tmp_path):
    p = tmp_path / "sub" / "pred.key"
    write_key_file({"a": "x", "b": ["y", "z"], "c": None, "d": []}, p)
    assert p.read_text() == "a x\nb y z\n"
    with pytest.raises(ValueError, match="whitespace"):
        write_key_file({"a": "x y"}, p)
    assert p.read_text() == "a x\nb y z\n"  # atomic: the failed write left the old file
