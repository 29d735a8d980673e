"""Word sense predictions for a whole file: ``ctxemb predict STORE --input FILE --output FILE`` and
``ctxemb wsd tag --input FILE --output FILE`` (one implementation, :func:`tag_file`).

Two kinds of input:

- **A Raganato-format data set** (a ``*.xml`` file, a folder holding one ``*.data.xml``, or ``input_format=
  "raganato"``): every ``<instance>`` is disambiguated with the lemma and POS the data set gives, as
  ``ctxemb wsd eval`` does (:meth:`~ctxemb.wsd.disambiguate.Disambiguator.disambiguate_sentences`). One output
  record per instance, in document order. With ``format="key"`` the output is a key file (``<instance id>
  <sense key>`` per answered instance) that ``Scorer.java`` and :func:`ctxemb.metrics.wsd.score_files` read.
- **A table of texts** (JSONL, CSV, TSV, TXT with one text per line; JSON and Parquet too: any file
  :func:`ctxemb.io.tables.open_rows` reads): every content word of each row's ``text`` column is tagged as
  :meth:`~ctxemb.wsd.disambiguate.Disambiguator.tag` tags raw text. JSONL output: one line per input row, the input
  columns plus ``predictions`` (a list of prediction objects, in text order). CSV output: flattened, one record per
  tagged word, with ``row`` (the 0-based index of its input row; skipped rows count, so the index is the same with
  or without ``skip_bad_rows``), ``id`` when an id column is mapped (``columns={"id": ...}``), then the prediction
  fields; a row without a word to tag keeps one record with the prediction fields blank, so that every input row is
  in the output.

A prediction's fields are those of :class:`~ctxemb.wsd.disambiguate.SensePrediction` (:data:`PREDICTION_FIELDS`):
``position``, ``word``, ``lemma``, ``pos``, ``sense_key``, ``synset``, ``gloss``, ``score``, ``runner_up_key``,
``runner_up_score``, ``backed_off``, ``n_candidates``, ``n_scored``; a Raganato record adds ``instance_id`` and
``sentence_id`` in front. In CSV, None is a blank field.

Rows are read, disambiguated and written in chunks of ``batch_size`` (one embedder call each), with a progress bar;
the output is written atomically (an error leaves an existing output file as it was). A table row that cannot be
used (its text missing, blank or not a string; a line that is not JSON; a wrong field count) stops the run with a
``ValueError`` naming the row (``FILE line N`` or ``FILE row I``); with ``skip_bad_rows=True`` it is reported
through ``on_skip``, counted in :attr:`TagFileResult.skipped` and left out. A Raganato file is checked as a whole
when read (:func:`~ctxemb.wsd.corpus.read_raganato` names the bad sentence); it is read whole before the first
chunk (SemCor's 37k sentences take seconds), then disambiguated and written in chunks of ``batch_size`` sentences.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ctxemb.core.validation import check_choice, check_int
from ctxemb.core.atomic import atomic_write
from ctxemb.io.outputs import output_format
from ctxemb.io.tables import BadRow, open_rows, resolve_columns
from ctxemb.wsd.corpus import Corpus, read_raganato
from ctxemb.wsd.disambiguate import Disambiguator, SensePrediction
from ctxemb.wsd.sense_store import SenseStore
from ctxemb.wsd.sense_store_files import STORE_FILES
from ctxemb.wsd.options import INPUT_FORMATS, OUTPUT_FORMATS

logger = logging.getLogger(__name__)

__all__ = ["INPUT_FORMATS", "OUTPUT_FORMATS", "PREDICTION_FIELDS", "TagFileResult", "is_sense_store",
           "load_disambiguator", "store_embedder_config", "tag_file", "tag_output_format"]

PREDICTION_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SensePrediction)
                                           if f.name != "instance_id")
_INSTANCE_FIELDS = ("instance_id", "sentence_id") + PREDICTION_FIELDS


@dataclass
class TagFileResult:
    """What :func:`tag_file` did.

    Attributes:
        rows: input rows read (a table) or instances (a Raganato data set).
        written: output records written (key files: answered instances only).
        tagged: words tagged (a table) or instances answered with a sense key (a Raganato data set).
        skipped: the skipped table rows as (where, reason).
        output: the output file.
        input_kind: ``"table"`` or ``"raganato"``.
    """

    rows: int = 0
    written: int = 0
    tagged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    output: Path | None = None
    input_kind: str = "table"


class _BadInput(Exception):
    """A table row whose text cannot be used; its message is the reason."""


# --------------------------------------------------------------------------------------------------- loading


def is_sense_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a saved :class:`~ctxemb.wsd.sense_store.SenseStore` directory (it holds every file of
    :data:`~ctxemb.wsd.sense_store_files.STORE_FILES`)."""
    path = Path(path)
    return path.is_dir() and all((path / name).is_file() for name in STORE_FILES)


def store_embedder_config(store: SenseStore, model: str | None = None) -> dict[str, Any]:
    """The embedder configuration to query ``store`` with: the one it records, with ``model`` in place of the
    recorded model when given.

    Raises:
        ValueError: the store records no embedder configuration, or ``model`` differs from the recorded model
            (queries from another model would be compared with sense vectors of another space).
    """
    recorded = store.metadata.get("embedder")
    if not recorded:
        raise ValueError("the sense store's metadata names no embedder configuration (metadata['embedder']); "
                         "cannot embed queries for it")
    config = dict(recorded)
    if model is not None:
        from ctxemb.search.inputs import embedder_config_differences

        diffs = embedder_config_differences(recorded, dict(recorded, model=str(model)), stored_name="store")
        if diffs:
            raise ValueError("model %r does not match the sense store, which was built with another embedder:\n%s"
                             % (str(model), "\n".join(diffs)))
        config["model"] = str(model)
    return config


def load_disambiguator(store: str | os.PathLike | SenseStore, *, model: str | None = None, device: str = "cpu",
                       **options: Any) -> Disambiguator:
    """A :class:`~ctxemb.wsd.disambiguate.Disambiguator` over a saved store, with the embedder it records.

    The embedder is built from the store's ``metadata["embedder"]`` (model, layers, pooling, precision; a
    sense-tuned encoder's training run is checked against its model directory), so its queries live in the
    store's space.

    Args:
        store: a store directory or a loaded :class:`~ctxemb.wsd.sense_store.SenseStore`.
        model: load this model instead of the recorded one (it must match the store's configuration).
        device: torch device of the embedder.
        options: passed to :class:`~ctxemb.wsd.disambiguate.Disambiguator` (``batch_size``, ``back_off``,
            ``prior_weight``, ``multiword``).

    Raises:
        FileNotFoundError: no store at ``store``.
        ValueError: the store records no embedder, or the embedder differs from the recorded one.
    """
    from ctxemb.embedding.embedder import Embedder, EmbedderConfig

    if not isinstance(store, SenseStore):
        store = SenseStore.load(store)
    fields = EmbedderConfig.from_dict(store_embedder_config(store, model)).to_dict()  # validates the fields
    embedder = Embedder.from_pretrained(fields.pop("model"), device=device, **fields)
    return Disambiguator(store, embedder, **options)


# --------------------------------------------------------------------------------------------------- formats


def tag_output_format(path: str | os.PathLike, format: str | None = None) -> str:
    """The output format: ``format`` if given, else from the extension (``.jsonl``, ``.csv``, ``.key``).

    Raises:
        ValueError: an unknown format, or an extension that names none.
    """
    return output_format(path, format, OUTPUT_FORMATS)


def _raganato_xml(path: Path, input_format: str | None) -> Path | None:
    """The XML file when the input is a Raganato data set, else None."""
    if input_format is not None:
        check_choice(input_format, "input format", INPUT_FORMATS)
        if input_format != "raganato":
            return None
    if path.is_dir():
        xmls = sorted(path.glob("*.data.xml"))
        if len(xmls) == 1:
            return xmls[0]
        if input_format == "raganato" or xmls:
            raise FileNotFoundError("data set folder %s must hold exactly one *.data.xml file, found %d: %s"
                                    % (path, len(xmls), [x.name for x in xmls]))
        return None
    if input_format == "raganato" or path.suffix.lower() == ".xml":
        if not path.is_file():
            raise FileNotFoundError("%s not found (it should hold a Raganato-format data set)" % path)
        return path
    return None


def _cell(value: Any) -> Any:
    return "" if value is None else value


# --------------------------------------------------------------------------------------------------- entry point


def tag_file(store: Disambiguator | str | os.PathLike, input: str | os.PathLike, output: str | os.PathLike, *,
             columns: Mapping[str, Any] | None = None, input_format: str | None = None, format: str | None = None,
             batch_size: int = 32, skip_bad_rows: bool = False, progress_bar: bool = True, device: str = "cpu",
             model: str | None = None, on_skip: Callable[[str, str], None] | None = None) -> TagFileResult:
    """Disambiguate a file of inputs and write the predictions to ``output`` (see the module docstring).

    Args:
        store: a :class:`~ctxemb.wsd.disambiguate.Disambiguator`, or a sense store directory (loaded with
            :func:`load_disambiguator` once the input and output are checked: its recorded embedder on ``device``,
            embedding ``batch_size`` texts at a time).
        input: a Raganato data set (``.xml`` file or its folder) or a table of texts (JSONL, CSV, TSV, TXT, JSON,
            Parquet).
        output: the output file, written atomically.
        columns: role -> input column for tables: ``text`` (default ``"text"``), ``id`` (CSV output: carried into
            each record; default none).
        input_format: one of :data:`INPUT_FORMATS` when the input's extension does not say it.
        format: ``"jsonl"``, ``"csv"`` or ``"key"`` (Raganato input only); None: from the output's extension.
        batch_size: table rows or data set sentences per embedder call (and per streamed chunk).
        skip_bad_rows: skip (and report) table rows whose text cannot be used instead of stopping at the first.
        progress_bar: show a tqdm bar on stderr.
        device: torch device when ``store`` is a directory.
        model: when ``store`` is a directory, load this model instead of the one the store records (it must match
            the store's configuration).
        on_skip: called with (where, reason) for each skipped row; default: a logged warning.

    Returns:
        A :class:`TagFileResult`.

    Raises:
        ValueError: a bad row (naming its line or row; unless ``skip_bad_rows``), no text column, an empty input,
            an unknown format, ``format="key"`` for a table, ``columns`` or ``skip_bad_rows`` for a Raganato data
            set, an input column named ``predictions`` (JSONL output), ``output`` equal to ``input``, every row bad.
        FileNotFoundError: a missing input file or store.
        TypeError: ``model`` with a Disambiguator (whose embedder is already chosen).
    """
    batch_size = check_int(batch_size, "batch_size", low=1)
    if isinstance(store, Disambiguator) and model is not None:
        raise TypeError("model applies to a store directory; a Disambiguator's embedder is already chosen")
    fmt = tag_output_format(output, format)
    input_path = Path(input)
    if Path(output).resolve() == input_path.resolve():
        raise ValueError("output %s is the input file; write the predictions elsewhere" % output)
    xml = _raganato_xml(input_path, input_format)
    if xml is None and fmt == "key":
        raise ValueError("format 'key' writes a Raganato key file (instance id, sense key): it needs a Raganato XML "
                         "input, whose instances have ids; for a table of texts write jsonl or csv")
    if xml is not None and columns:
        raise ValueError("columns applies to tables of texts; %s is a Raganato data set (its instances are marked "
                         "in the XML)" % input)
    if xml is not None and skip_bad_rows:
        raise ValueError("skip_bad_rows applies to tables of texts; a Raganato data set (%s) is checked as a whole "
                         "when read, and a bad sentence stops the run with its id" % input)
    if xml is None:
        roles = resolve_columns(columns, {"text": "text", "id": None})
        table = open_rows(input, what="texts to disambiguate", format=input_format)
        if table.columns is not None:
            missing = [c for c in roles.values() if c is not None and c not in table.columns]
            if missing:
                raise ValueError("%s: no column %s; its columns are %s (name the text's column with --columns "
                                 "text=COLUMN)" % (table.name, ", ".join(repr(c) for c in missing),
                                                   ", ".join(repr(c) for c in table.columns)))
    else:
        corpus = read_raganato(xml, key_path="")  # instances to answer; gold keys are not needed
    dis = store if isinstance(store, Disambiguator) else load_disambiguator(store, model=model, device=device,
                                                                             batch_size=batch_size)
    result = TagFileResult(output=Path(output), input_kind="table" if xml is None else "raganato")
    with atomic_write(output, "w", encoding="utf-8", newline="") as f:
        if xml is None:
            _tag_table(dis, table, roles, f, fmt, batch_size, skip_bad_rows, progress_bar, on_skip, result)
        else:
            _tag_corpus(dis, corpus, f, fmt, batch_size, progress_bar, result)
    return result


def _bar(iterable, progress_bar: bool, **kwargs):
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=True if not progress_bar else None, **kwargs)


def _row_text(row: Mapping, column) -> str:
    if column not in row:
        raise _BadInput("no column %r; its columns are %s" % (column, ", ".join(repr(k) for k in row) or "none"))
    value = row[column]
    if not isinstance(value, str):
        raise _BadInput("column %r must be a string; got %r" % (column, value))
    if not value.strip():
        raise _BadInput("column %r is blank" % column)
    return value


def _prediction(p: SensePrediction) -> dict[str, Any]:
    return {name: getattr(p, name) for name in PREDICTION_FIELDS}


def _tag_table(dis: Disambiguator, table, roles: Mapping[str, Any], f, fmt: str, batch_size: int,
               skip_bad_rows: bool, progress_bar: bool, on_skip, result: TagFileResult) -> None:
    report = on_skip or (lambda where, reason: logger.warning("%s: skipped: %s", where, reason))
    id_column = roles.get("id")
    writer = None
    if fmt == "csv":
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["row"] + (["id"] if id_column is not None else []) + list(PREDICTION_FIELDS))
    batch: list[tuple[int, str, Mapping, str]] = []

    def flush() -> None:
        tagged = dis.tag_texts([text for *_, text in batch], show_progress_bar=False)
        for (index, where, row, _), preds in zip(batch, tagged):
            result.tagged += len(preds)
            if fmt == "jsonl":
                if "predictions" in row:
                    raise ValueError("%s: the input already has a column 'predictions', which the output adds; "
                                     "rename it" % where)
                record = {**row, "predictions": [_prediction(p) for p in preds]}
                f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            else:
                head = [index] + ([_cell(row.get(id_column))] if id_column is not None else [])
                for p in preds or [None]:
                    values = _prediction(p).values() if p is not None else [None] * len(PREDICTION_FIELDS)
                    writer.writerow(head + [_cell(v) for v in values])
            result.written += 1
        batch.clear()

    for index, (where, row) in enumerate(_bar(table.rows, progress_bar, desc="wsd tag", unit="row")):
        result.rows += 1
        try:
            if isinstance(row, BadRow):
                raise _BadInput(row.reason)
            if id_column is not None and id_column not in row:
                raise _BadInput("no id column %r; its columns are %s" % (id_column, ", ".join(map(repr, row))))
            text = _row_text(row, roles["text"])
        except _BadInput as e:
            if not skip_bad_rows:
                raise ValueError("%s: %s (skip such rows with skip_bad_rows / --skip-bad-rows)" % (where, e)) from None
            result.skipped.append((where, str(e)))
            report(where, str(e))
            continue
        batch.append((index, where, row, text))
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    if result.written == 0:
        raise ValueError("%s: all %d rows were bad; nothing was written" % (table.name, result.rows))


def _tag_corpus(dis: Disambiguator, corpus: Corpus, f, fmt: str, batch_size: int, progress_bar: bool,
                result: TagFileResult) -> None:
    sentences = [s for s in corpus.sentences() if s.instances]
    if not sentences:
        raise ValueError("data set %r has no <instance> to disambiguate" % corpus.name)
    writer = None
    if fmt == "csv":
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(_INSTANCE_FIELDS)
    bar = _bar(None, progress_bar, desc="wsd %s" % corpus.name, unit="instance",
               total=sum(len(s.instances) for s in sentences))
    with bar:
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start:start + batch_size]
            for sentence, preds in zip(chunk, dis.disambiguate_sentences(chunk, show_progress_bar=False)):
                for p in preds:
                    result.rows += 1
                    result.tagged += p.sense_key is not None
                    if fmt == "key":
                        if p.sense_key is None:
                            continue  # unanswered: left out, as write_key_file does
                        if any(c.isspace() for c in p.instance_id):
                            raise ValueError("%s: sentence %s: instance id %r has whitespace, which a key file "
                                             "cannot hold" % (corpus.name, sentence.id, p.instance_id))
                        f.write("%s %s\n" % (p.instance_id, p.sense_key))
                    else:
                        record = {"instance_id": p.instance_id, "sentence_id": sentence.id, **_prediction(p)}
                        if fmt == "jsonl":
                            f.write(json.dumps(record, ensure_ascii=False) + "\n")
                        else:
                            writer.writerow([_cell(v) for v in record.values()])
                    result.written += 1
                bar.update(len(preds))
