"""Several runs of one task: a grid search on dev (``ctxemb finetune TASK --search ...``) and repeated seeds
(``--seeds K``), with a trial table that grows one row per finished run.

Each trial is an ordinary run into its own directory (``<out_dir>/trial-<i>`` or ``<out_dir>/seed-<s>``). After
each one, its row (the settings it changed, the dev metrics of the model it saved, the best step, the seconds it
took) is appended to ``<out_dir>/trials.jsonl`` and the markdown table ``<out_dir>/trials.md`` is rewritten
atomically. Started again with the same settings, a search skips the trials that already have a row, so an
interrupted search resumes where it stopped instead of starting over (a trial killed mid-run restarts from scratch:
its directory is cleared first). A time budget stops starting new trials once spent; the table records it.

What a trial's result depends on beyond its grid values (the model, the data files' contents, the seed, every other
setting of the recipe and of the loop: :func:`run_settings`) is recorded in ``<out_dir>/search.json`` with the
grid. A search started again in the same directory with anything of that changed is refused, naming the settings
that differ, instead of reporting the old trials as its own: give it a new ``--out-dir`` (nothing is deleted for
you).

Only dev metrics are read: a trial's model is selected and reported on the task's ``eval_split``. Test splits are
never touched here.

The runs themselves go through a ``train_fn(task, config)`` the caller passes (:func:`ctxemb.training.runner.run_task`
passes itself), so a trial is exactly what ``ctxemb finetune`` with the same flags would do.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import logging
import math
import os
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ctxemb.core.validation import read_json_file
from ctxemb.core.atomic import atomic_write

logger = logging.getLogger(__name__)

__all__ = ["TrialRow", "apply_overrides", "parse_grid", "run_grid", "run_seeds", "run_settings", "setting_name",
           "summarize_seeds"]

TRIALS_FILE = "trials.jsonl"
TABLE_FILE = "trials.md"


@dataclass
class TrialRow:
    """One finished run: its name, the settings it changed, its dev metrics and cost."""

    name: str
    settings: dict[str, Any]
    metrics: dict[str, float]
    primary: float
    best_step: int | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_grid(specs: Sequence[str]) -> dict[str, list[Any]]:
    """``["learning_rate=2e-5,5e-5", "epochs=2,3", "head=mean,cls"]`` -> ``{"learning_rate": [2e-05, 5e-05], ...}``.

    Values are read as JSON where they parse (numbers, ``true``/``false``), else kept as strings. A name is a field
    of the task's config or of its loop's ``TrainConfig`` (``train.`` prefix optional); hyphens may stand for
    underscores.

    Raises:
        ValueError: a spec without ``=``, with an empty name or no value, or a name given twice.
    """
    grid: dict[str, list[Any]] = {}
    spelled: dict[str, str] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        typed, name = name.strip(), name.strip().replace("-", "_")
        if not sep or not name or not values.strip():
            raise ValueError(f"a search axis is NAME=V1,V2,...; got {spec!r}")
        if name in grid:
            also = "" if spelled[name] == typed else f" (as {spelled[name]!r} and {typed!r})"
            raise ValueError(f"search axis {name!r} is given twice{also}: give each setting once")
        spelled[name] = typed
        grid[name] = [_parse_value(v.strip()) for v in values.split(",") if v.strip()]
    return grid


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def setting_name(config, name: str) -> str:
    """The setting a grid or override name sets, as one spelling: ``"head"`` (a field of the task's config) or
    ``"train.learning_rate"`` (of its loop's ``TrainConfig``, named with or without ``train.``).

    Raises:
        ValueError: a name that is neither a field of the config nor of its ``TrainConfig``.
    """
    recipe_fields = {f.name for f in dataclasses.fields(config)} - {"train"}
    train_fields = {f.name for f in dataclasses.fields(config.train)}
    key = name[len("train."):] if name.startswith("train.") else name
    if not name.startswith("train.") and key in recipe_fields:
        return key
    if key in train_fields:
        return "train." + key
    raise ValueError(f"{name!r} is neither a setting of {type(config).__name__} nor of the training loop "
                     f"(TrainConfig)")


def apply_overrides(config, overrides: Mapping[str, Any], *, out_dir: str):
    """A copy of the task config ``config`` with ``overrides`` (recipe fields, or loop fields by name or as
    ``train.<field>``) and its run directory set to ``out_dir``; validated as a new config would be.

    Raises:
        ValueError: a name that is neither a field of the config nor of its ``TrainConfig``, two names of one
            setting, or a value the config refuses (its own message).
    """
    base = copy.deepcopy(config)
    recipe: dict[str, Any] = {}
    train: dict[str, Any] = {"out_dir": out_dir}
    _check_one_name_each(base, overrides)
    for name, value in overrides.items():
        key = setting_name(base, name)
        if key.startswith("train."):
            train[key[len("train."):]] = value
        else:
            recipe[key] = value
    if base.train.max_steps is not None and "epochs" in recipe:
        train.setdefault("max_steps", None)  # resolved again from the new epochs
    new_train = dataclasses.replace(base.train, **train)
    return dataclasses.replace(base, train=new_train, **recipe)


def _check_one_name_each(config, names) -> None:
    """Refuse two names of one setting (``learning_rate`` and ``train.learning_rate``): one value would win and the
    table would record both."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.setdefault(setting_name(config, name), name)
        if first != name:
            raise ValueError(f"{first!r} and {name!r} are two names of one setting ({setting_name(config, name)}): "
                             f"give each setting once")


# loop settings that change how a run is watched or stored, not the model it trains
_NOT_RESULTS = ("train.out_dir", "train.progress_bar", "train.log_every", "train.save_every",
                "train.keep_last_checkpoints", "train.resume", "train.report_to", "train.find_unused_parameters")
_READ_FROM = ("train_file", "dev_file", "model")  # settings naming files or directories whose contents count too


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _exists(value: Any) -> bool:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        return False
    try:
        return Path(value).exists()
    except (OSError, ValueError):  # not a path this system can have
        return False


def _contents(path: Path) -> str:
    """A content hash of a file, or of every file under a directory (names and bytes)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest, size = hashlib.sha256(), 0
    for p in files:
        if p != path:
            digest.update(p.relative_to(path).as_posix().encode("utf-8") + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
    return f"sha256 {digest.hexdigest()[:16]}, {size} bytes" + ("" if path.is_file() else f" in {len(files)} files")


def run_settings(config, varied: Sequence[str] = ()) -> dict[str, Any]:
    """What decides the result of a run of ``config`` besides the ``varied`` settings (names as
    :func:`setting_name` gives them): every setting of the config and of its loop, flattened to dotted names
    (``epochs``, ``train.seed``, ``columns.text``), and the contents (a hash and size) of the data files and of a
    local model directory it names. Loop settings that only watch or store a run (the run directory, logging,
    checkpoints kept, the progress bar) are left out."""
    d = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
    flat = _flatten(d)
    drop = set(varied) | set(_NOT_RESULTS) | ({"train.max_steps"} if "epochs" in varied else set())
    out = {k: v for k, v in flat.items() if k not in drop}
    for key, value in list(out.items()):
        if key.rpartition(".")[2] in _READ_FROM and _exists(value):
            out[key + " (contents)"] = _contents(Path(value))
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def _differences(then: Mapping[str, Any], now: Mapping[str, Any], shown: int = 8) -> str:
    keys = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))

    def value(d, k):
        text = "(not set)" if d.get(k) is None else json.dumps(d[k])
        return text if len(text) <= 72 else text[:24] + "..." + text[-45:]  # a path's end tells it apart
    lines = [f"{k} {value(then, k)} then, {value(now, k)} now" for k in keys[:shown]]
    return "; ".join(lines) + (f"; and {len(keys) - shown} more" if len(keys) > shown else "")


def _read_rows(out_dir: Path) -> list[dict[str, Any]]:
    path = out_dir / TRIALS_FILE
    if not path.is_file():
        return []
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {i} is not JSON ({e}); remove it to rerun that trial") from None
    return rows


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text)


def _append_row(out_dir: Path, row: TrialRow) -> list[dict[str, Any]]:
    """Add ``row`` to ``trials.jsonl`` (rewritten atomically); returns every row now in it."""
    rows = _read_rows(out_dir) + [row.to_dict()]
    _write_text(out_dir / TRIALS_FILE, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return rows


def _write_table(out_dir: Path, rows: list[dict[str, Any]], *, primary: str, greater_is_better: bool,
                 header: Mapping[str, Any]) -> None:
    keys = sorted({k for r in rows for k in r["settings"]})
    ordered = sorted(rows, key=lambda r: r["primary"], reverse=greater_is_better)
    lines = [f"# {header.get('title', 'Trials')}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items() if k != "title"]
    lines += ["", "| trial | " + " | ".join(keys) + f" | dev {primary} | best step | minutes |",
              "|---" * (len(keys) + 4) + "|"]
    for r in ordered:
        cells = [str(r["settings"].get(k, "")) for k in keys]
        step = "" if r["best_step"] is None else str(r["best_step"])
        lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {r['primary']:.2f} | {step} | "
                     f"{r['seconds'] / 60:.1f} |")
    _write_text(out_dir / TABLE_FILE, "\n".join(lines) + "\n")


def _run_one(task, config, overrides: Mapping[str, Any], name: str, out_dir: Path,
             train_fn: Callable) -> TrialRow:
    run_dir = out_dir / name
    if run_dir.exists():  # a trial that never wrote its row: killed mid-run; start it again from scratch
        logger.info("%s has no row in %s: its directory is cleared and the trial run again", run_dir, TRIALS_FILE)
        shutil.rmtree(run_dir)
    trial_config = apply_overrides(config, overrides, out_dir=str(run_dir))
    primary, _ = task.primary(trial_config)
    start = time.perf_counter()
    result = train_fn(task, trial_config)
    seconds = time.perf_counter() - start
    metrics = {k: float(v) for k, v in result.final_metrics.items()}
    if primary not in metrics:
        raise ValueError(f"trial {name}: the run reported {sorted(metrics)}, not its primary metric {primary!r}")
    record = Path(result.model_dir) / "run.json"
    best_step = read_json_file(record, "run record").get("metrics", {}).get("best_step") if record.is_file() else None
    return TrialRow(name=name, settings=dict(overrides), metrics=metrics, primary=metrics[primary],
                    best_step=best_step, seconds=seconds)


def _check_same_search(out_dir: Path, description: dict[str, Any]) -> None:
    """Record the search (its kind, task, grid or seeds, and :func:`run_settings`) in ``<out_dir>/search.json``, or
    refuse to go on when the directory holds another one: its finished trials would be reused as this search's."""
    path = out_dir / "search.json"
    if not path.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_text(path, json.dumps(description, indent=2, sort_keys=True) + "\n")
        return
    saved = read_json_file(path, "search description")
    if saved == description:
        return
    outline = {k: v for k, v in description.items() if k != "settings"}
    saved_outline = {k: v for k, v in saved.items() if k != "settings"} if isinstance(saved, dict) else saved
    start_over = (f"Use a new --out-dir for this search (or remove {out_dir} yourself to start over: its trials "
                  f"are not deleted for you)")
    if saved_outline != outline:
        raise ValueError(f"{out_dir} holds another search ({path}: {saved_outline}); this one is {outline}. "
                         f"{start_over}")
    if "settings" not in saved:
        raise ValueError(f"{out_dir} holds a search recorded by an earlier ctxemb without the settings its trials "
                         f"ran with ({path}), so its finished trials cannot be checked against this run's. "
                         f"{start_over}")
    raise ValueError(f"{out_dir} holds the trials of this search run with other settings, which this run would "
                     f"reuse as its own: {_differences(saved['settings'], description['settings'])}. {start_over}")


def run_grid(task, config, grid: Mapping[str, Sequence[Any]], *, train_fn: Callable,
             budget_minutes: float | None = None) -> list[dict[str, Any]]:
    """Run every combination of ``grid`` (in order, the last axis fastest) as its own trial under
    ``config.train.out_dir``; rows already in ``trials.jsonl`` are kept and their trials skipped.

    Args:
        task: the registered task (for its primary metric).
        config: the base config (the CLI's: defaults, preset, flags); each trial overrides its grid values.
        grid: axis name -> values (see :func:`parse_grid`).
        train_fn: ``train_fn(task, config)`` runs one trial and returns a result with ``final_metrics`` and
            ``model_dir``.
        budget_minutes: stop starting new trials once this much wall time has passed (None: run them all).

    Returns:
        The rows (:meth:`TrialRow.to_dict`) of every finished trial, earlier ones included, in trial order.

    Raises:
        ValueError: an empty grid or axis, an unknown setting, two names of one setting, or ``out_dir`` holding a
            different search or the same grid run with other settings (:func:`run_settings`).
    """
    if not grid or any(len(v) == 0 for v in grid.values()):
        raise ValueError(f"the search grid needs at least one axis with at least one value; got {dict(grid)}")
    out_dir = Path(config.train.out_dir)
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    _check_one_name_each(config, grid)
    for combo in combos:  # every setting is checked before the first run
        apply_overrides(config, combo, out_dir=str(out_dir / "check"))
    primary, greater = task.primary(config)
    _check_same_search(out_dir, {"kind": "grid", "task": task.name, "grid": {k: list(v) for k, v in grid.items()},
                                 "settings": run_settings(config, [setting_name(config, k) for k in grid])})
    done = {r["name"]: r for r in _read_rows(out_dir)}
    start, rows = time.perf_counter(), []
    header = {"title": f"Search on dev: {task.name}", "primary metric": f"{primary} (dev, {config.eval_split})",
              "grid": json.dumps({k: list(v) for k, v in grid.items()}),
              "budget": f"{budget_minutes} minutes" if budget_minutes else "none"}
    for i, combo in enumerate(combos):
        name = f"trial-{i}"
        if name in done:
            rows.append(done[name])
            continue
        if budget_minutes is not None and (time.perf_counter() - start) / 60 >= budget_minutes:
            logger.warning("search budget of %s minutes spent: %d of %d trials not started", budget_minutes,
                           len(combos) - i, len(combos))
            break
        row = _run_one(task, config, combo, name, out_dir, train_fn)
        all_rows = _append_row(out_dir, row)
        rows.append(row.to_dict())
        header["spent"] = f"{sum(r['seconds'] for r in all_rows) / 60:.1f} minutes of runs"
        _write_table(out_dir, all_rows, primary=primary, greater_is_better=greater, header=header)
        logger.info("trial %d/%d %s: dev %s %.2f", i + 1, len(combos), combo, primary, row.primary)
    return rows


def summarize_seeds(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value), min and max of ``values``."""
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"need finite values; got {values}")
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def run_seeds(task, config, k: int, *, train_fn: Callable) -> dict[str, Any]:
    """Run the same recipe with seeds ``seed, seed + 1, ..., seed + k - 1`` (each into ``seed-<s>``) and report
    each run's dev metrics and, per metric, the mean and sample standard deviation (``seeds.json``, and the rows in
    ``trials.jsonl``/``trials.md``; finished seeds are skipped when run again).

    Raises:
        ValueError: ``k`` < 1, or ``out_dir`` holding a different search or these seeds run with other settings.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"seeds must be a positive integer; got {k!r}")
    seeds = [config.train.seed + i for i in range(k)]
    out_dir = Path(config.train.out_dir)
    primary, greater = task.primary(config)
    _check_same_search(out_dir, {"kind": "seeds", "task": task.name, "seeds": seeds,
                                 "settings": run_settings(config, ["train.seed"])})
    done = {r["name"]: r for r in _read_rows(out_dir)}
    rows = []
    header = {"title": f"Seeds: {task.name}", "primary metric": f"{primary} (dev, {config.eval_split})",
              "seeds": ", ".join(map(str, seeds))}
    for seed in seeds:
        name = f"seed-{seed}"
        if name in done:
            rows.append(done[name])
            continue
        row = _run_one(task, config, {"train.seed": seed}, name, out_dir, train_fn)
        all_rows = _append_row(out_dir, row)
        rows.append(row.to_dict())
        _write_table(out_dir, all_rows, primary=primary, greater_is_better=greater, header=header)
    names = sorted(set.intersection(*(set(r["metrics"]) for r in rows)))
    summary = {"task": task.name, "primary_metric": primary, "seeds": seeds,
               "runs": {r["name"]: r["metrics"] for r in rows},
               "summary": {m: summarize_seeds([r["metrics"][m] for r in rows]) for m in names}}
    _write_text(out_dir / "seeds.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
