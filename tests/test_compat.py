"""The import paths that README.md, docs/ and examples/ used before the package layout (ctxemb._compat) keep working
for one release: each import line still imports, gives the same objects as the module the name lives in now, and
warns (a DeprecationWarning naming the new module, at the line that imported it) only where the module moved.

Every check runs in one fresh interpreter (an old name warns on its first import only), started once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: import lines whose module did not move: they import without a warning
UNMOVED = (
    "from ctxemb import Embedder",
    "from ctxemb import Embedder, load_model",
    "from ctxemb import load_encoder, load_tokenizer",
    "from ctxemb.cli import main as ctxemb",
    "from ctxemb.embedding import Embedder",
    "from ctxemb.evaluation.mteb_encoder import MTEBEncoder",
    "from ctxemb.evaluation.mteb_encoder import MTEBEncoder, stsb_task",
    "from ctxemb.evaluation.similarity import SimilarityOptions, results_to_markdown, run_similarity_tasks",
    "from ctxemb.evaluation.wsd import evaluate_wsd",
    "from ctxemb.geometry import (anisotropy, anisotropy_sampled, cosine_contributions, rogue_dimensions,\n"
    "                             informativity, Standardizer)",
    "from ctxemb.search import (HNSWParams, IVFPQParams, SemanticIndex, build_sentence_index, build_word_index,\n"
    "                           query_sentences, query_words)",
    "from ctxemb.search import DocumentIndex, build_document_index",
    "from ctxemb.search import HNSWParams, SemanticIndex, build_sentence_index, build_word_index, query_sentences, "
    "query_words",
    "from ctxemb.search import HybridParams, SemanticIndex, build_sentence_index, query_sentences",
    "from ctxemb.search import IVFPQParams, SemanticIndex",
    "from ctxemb.search import build_document_index, build_sentence_index, query_sentences",
    "from ctxemb.search.sharded import add_shard, merge_shards, train_ivfpq",
    "from ctxemb.training import DatasetBatches, EvalBatches, TrainConfig, train",
    "from ctxemb.training import TrainConfig",
    "from ctxemb.wsd import BuildConfig, Disambiguator, SenseStore, build_sense_store, read_dataset",
    "from ctxemb.wsd import BuildConfig, Disambiguator, build_sense_store, read_dataset",
    "from ctxemb.wsd import Disambiguator, SenseStore",
    "from ctxemb.wsd.tag_files import load_disambiguator, tag_file",
)

#: import lines whose module moved: line -> (the module the warning names, {name: the module it lives in now, or
#: None for a name that has no new place: an old run function, kept as a call of run_task})
MOVED = {
    "from ctxemb.fill_mask import MaskFiller, fill_mask":
        ("ctxemb.embedding.fill_mask", {"MaskFiller": "ctxemb.embedding.fill_mask",
                                        "fill_mask": "ctxemb.embedding.fill_mask"}),
    "from ctxemb.finetuning.predict import SequencePredictor":
        ("ctxemb.tasks.sequence.predict", {"SequencePredictor": "ctxemb.tasks.sequence.predict"}),
    "from ctxemb.finetuning.tasks import FinetuneConfig, run_finetuning":
        ("ctxemb.tasks.sequence.task", {"FinetuneConfig": "ctxemb.tasks.sequence.config", "run_finetuning": None}),
    "from ctxemb.finetuning.token_predict import QAPredictor, TokenPredictor":
        ("ctxemb.tasks.token.predict", {"QAPredictor": "ctxemb.tasks.token.predict",
                                        "TokenPredictor": "ctxemb.tasks.token.predict"}),
    "from ctxemb.finetuning.token_tasks import TokenFinetuneConfig, run_token_finetuning":
        ("ctxemb.tasks.token.task", {"TokenFinetuneConfig": "ctxemb.tasks.token.config",
                                     "run_token_finetuning": None}),
    "from ctxemb.paths import shared_data_dir":
        ("ctxemb.core.paths", {"shared_data_dir": "ctxemb.core.paths"}),
    "from ctxemb.sentence_transformers_writer import write_sentence_transformers_modules":
        ("ctxemb.embedding.st_writer", {"write_sentence_transformers_modules": "ctxemb.embedding.st_writer"}),
    "from ctxemb.tokenization import copy_tokenizer_files":
        ("ctxemb.models.tokenization", {"copy_tokenizer_files": "ctxemb.models.tokenization"}),
}

# Runs in the child: each line executed as a file of its own (its warnings recorded with where they point), then
# the names it bound compared with their homes; prints one JSON report.
_CHILD = r'''
import ast, importlib, json, sys, types, warnings

unmoved, moved = json.loads(sys.argv[1])
report = {"lines": {}, "finetuning_tasks": {}, "old_run_function": {}}


def names_of(line):
    aliases = ast.parse(line).body[0].names
    return [a.asname or a.name for a in aliases], [a.name for a in aliases]


for k, line in enumerate(unmoved + list(moved)):
    where = f"<docs import {k}>"
    scope = {"__name__": "__main__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(line, where, "exec"), scope)
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
    bound, imported = names_of(line)
    same = {}
    if error is None:
        for as_name, name in zip(bound, imported):
            obj = scope[as_name]
            home = moved[line][1][name] if line in moved else obj.__module__  # unmoved: where it is defined
            if home is None:  # no new place: an old run function
                same[name] = "callable" if callable(obj) else "not callable"
            else:
                same[name] = getattr(importlib.import_module(home), name, None) is obj
    report["lines"][line] = {
        "error": error, "same": same,
        "warnings": [{"category": w.category.__name__, "message": str(w.message), "file": w.filename,
                      "points_here": w.filename == where} for w in caught
                     if issubclass(w.category, DeprecationWarning) and "ctxemb" in str(w.message)]}

import ctxemb.finetuning.tasks
import ctxemb.training.recipe
report["finetuning_tasks"] = {
    "is_module": isinstance(ctxemb.finetuning.tasks, types.ModuleType),
    "run_finetuning_callable": callable(ctxemb.finetuning.tasks.run_finetuning),
    "result_is_run_result": ctxemb.finetuning.tasks.FinetuneResult is ctxemb.training.recipe.RunResult,
}

# calling an old run function warns, naming run_task, before it runs anything (here: a task nobody registered)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        ctxemb.finetuning.tasks.run_finetuning(types.SimpleNamespace(task="no-such-task"))
        raised = None
    except Exception as e:
        raised = type(e).__name__
report["old_run_function"] = {"raised": raised, "warnings": [str(w.message) for w in caught
                                                            if issubclass(w.category, DeprecationWarning)]}
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def report():
    moved = {line: [module, names] for line, (module, names) in MOVED.items()}
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([list(UNMOVED), moved])], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_old_import_line_still_imports_the_objects_of_the_new_places(report):
    for line in (*UNMOVED, *MOVED):
        entry = report["lines"][line]
        assert entry["error"] is None, (line, entry["error"])
        for name, same in entry["same"].items():
            expected = "callable" if line in MOVED and MOVED[line][1][name] is None else True
            assert same == expected, (line, name, same)


def test_a_moved_module_warns_naming_its_new_place_and_an_unmoved_one_does_not(report):
    for line in UNMOVED:
        assert report["lines"][line]["warnings"] == [], line
    for line, (new, _) in MOVED.items():
        warned = report["lines"][line]["warnings"]
        assert [w["category"] for w in warned] == ["DeprecationWarning"], (line, warned)
        assert f"moved to {new}" in warned[0]["message"], (line, warned)


def test_the_warning_points_at_the_import_line(report):
    """Python shows a DeprecationWarning by default only when it is attributed to ``__main__``: the warning must
    point at the line that imported the old name, not at importlib's frames or beyond them."""
    for line in MOVED:
        warned = report["lines"][line]["warnings"]
        assert warned and warned[0]["points_here"], (line, warned)


def test_the_old_sequence_module_holds_the_old_run_function_and_result_type(report):
    assert report["finetuning_tasks"] == {"is_module": True, "run_finetuning_callable": True,
                                          "result_is_run_result": True}
    called = report["old_run_function"]
    assert called["raised"] == "KeyError"  # get_task("no-such-task"): the call went to the registry and run_task
    assert any("run_finetuning(config) is replaced by ctxemb.training.runner.run_task" in w
               for w in called["warnings"]), called
