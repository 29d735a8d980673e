"""Class labels of any type for a custom task, as scikit-learn's ``LabelEncoder`` makes them: the classes are the
sorted distinct label values, class id ``i`` is the ``i``-th of them.

Labels may be strings (``"good"``, ``"bad"``), ints (stars 1-5: five classes, ids 0-4), floats that name classes
(``0.5``, ``1.0``) or bools. A CSV or TSV file has no types, so a label column of such a file whose every value is
an integer (``"1"``, ``"5"``) is read as ints, one whose every value is a number as floats, and anything else as
strings; JSON, JSONL, Parquet, ``datasets`` and DataFrame labels keep their own types. The classes are drawn from
the training and the dev split together (a label only dev has still gets an id, with a warning), so both map the
same way; the values, in id order and with their types, are saved with the model (``label_values`` in
``finetune_config.json``) and the predictors return them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ctxemb.io.tables import is_path

logger = logging.getLogger(__name__)

__all__ = ["UNTYPED_FORMATS", "class_label", "encode_labels"]

# Files whose fields are all text: a label column of numbers in them is read as numbers.
UNTYPED_FORMATS = (".csv", ".tsv")
_INT = re.compile(r"\s*[-+]?\d+\s*")
# More distinct classes than this, of numbers, suggests real-valued scores (regression) rather than classes.
_MANY_CLASSES = 20


def class_label(value: Any, where: str, column) -> Any:
    """A label value as read (checked, not yet a class id): a non-blank string, an int, a finite float or a bool
    (a numpy scalar becomes its Python value).

    Raises:
        ValueError: a missing, blank or non-finite label, or one of another type (naming ``where`` and ``column``).
    """
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy / pandas scalars
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    ok = (isinstance(value, str) and value.strip()) or isinstance(value, (bool, int)) or (
        isinstance(value, float) and math.isfinite(value))
    if not ok:
        raise ValueError("%s: label %r in column %r is not a class label (a non-blank string, an int, a finite "
                         "float or a bool)" % (where, value, column))
    return value


def _typed(values: list, untyped: bool) -> list:
    """A CSV/TSV column of integers (floats) as ints (floats); other columns as they are."""
    if not untyped or not all(isinstance(v, str) for v in values):
        return values
    if all(_INT.fullmatch(v) for v in values):
        return [int(v) for v in values]
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        return values
    return numbers if all(math.isfinite(x) for x in numbers) else values


def _kind(value: Any) -> str:
    return "bool" if isinstance(value, bool) else "str" if isinstance(value, str) else "number"


def encode_labels(splits: Mapping[str, Sequence], sources: Mapping[str, Any], *,
                  column) -> tuple[tuple, dict[str, list]]:
    """The classes of ``splits`` (examples, :class:`~ctxemb.tasks.sequence.data.TextExample`, whose labels are values
    as read: :func:`class_label`) and the splits with each label replaced by its class id.

    Args:
        splits: split name -> examples (``"train"`` first: its labels are the model's classes, with any the other
            splits add).
        sources: split name -> what it was read from (a CSV or TSV path makes a column of numbers numbers).
        column: the label column, for messages.

    Returns:
        (classes in id order, with their types; the splits with class ids as labels).

    Raises:
        ValueError: labels of different types (strings and numbers, bools and numbers), or fewer than 2 classes.
    """
    typed = {}
    for name, examples in splits.items():
        source = sources.get(name)
        untyped = is_path(source) and Path(source).suffix.lower() in UNTYPED_FORMATS
        typed[name] = _typed([ex.label for ex in examples], untyped)
    first: dict[str, tuple[Any, str]] = {}
    for name, values in typed.items():
        for ex, v in zip(splits[name], values):
            first.setdefault(_kind(v), (v, ex.id))
    if len(first) > 1:
        shown = " and ".join("%r (%s, %s)" % (v, kind, where) for kind, (v, where) in sorted(first.items()))
        raise ValueError("the labels in column %r mix types: %s; give every label as one type, or map names to "
                         "class ids with label_names" % (column, shown))
    if first.keys() == {"number"} and any(isinstance(v, float) for values in typed.values() for v in values):
        typed = {name: [float(v) for v in values] for name, values in typed.items()}
    classes = tuple(sorted(set().union(*typed.values())))
    if len(classes) < 2:
        raise ValueError("the labels in column %r have %d distinct value(s) (%s): a classifier needs at least 2; "
                         "for real-valued scores give regression=True" % (column, len(classes), ", ".join(
                             repr(c) for c in classes)))
    train = set(typed.get("train", ()))
    unseen = [c for c in classes if c not in train]
    if train and unseen:
        logger.warning("label column %r: %d label(s) occur only outside the training split (%s): each has a class, "
                       "never trained", column, len(unseen), ", ".join(repr(c) for c in unseen[:10]))
    if first.keys() == {"number"} and (len(classes) > _MANY_CLASSES or any(
            isinstance(c, float) and not c.is_integer() for c in classes)):
        logger.warning("label column %r: %d distinct numbers, each made a class; for real-valued scores train a "
                       "regression (--regression; regression=True from Python)", column, len(classes))
    ids = {c: i for i, c in enumerate(classes)}
    out = {name: [dataclasses.replace(ex, label=ids[v]) for ex, v in zip(splits[name], values)]
           for name, values in typed.items()}
    logger.info("label column %r: %d classes, the sorted distinct labels: %s", column, len(classes),
                ", ".join(f"{i} {c!r}" for i, c in enumerate(classes[:20])) + (" ..." if len(classes) > 20 else ""))
    return classes, out
