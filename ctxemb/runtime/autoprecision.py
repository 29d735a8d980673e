"""``precision="auto"``: the fastest precision path whose accuracy meets its bound on the machine at hand.

A short probe runs a fixed text (48 sentences written for it: news, science, fiction, instructions, dialogue; 4 to 57
words; numbers, names, rare words split into several subwords) through every path available here, in batches of 16:

- **speed**: one warm-up pass, then ``repeats`` rounds that alternate between the paths (so a busy machine slows
  them alike); a path's time is its best round;
- **accuracy**: the mean over the probe's words of the cosine between the path's word vector and the exact (fp32)
  one: the mean of the requested hidden states, subwords averaged. It must reach the path's bound
  (:data:`ctxemb.core.precision.ACCURACY_BOUNDS`: 0.999 for bf16, 0.99 for int8, 0.9999 for onnx-fp32) and, for
  ``auto`` to choose it, :data:`LEAST_MEAN_COSINE` (0.999), and no word may fall below :data:`LEAST_WORD_COSINE`
  (0.99: a path that is fine on average but loses some words is not chosen; ONNX Runtime's per-batch int8 had a
  least word cosine of 0.986 on 60 WikiText-2 sentences with MiniLM, and a mean of 0.9945 on 2,000: usable when
  asked for by name, not a default).

The fastest path within its bound wins; paths less than ``min_speedup`` (5%) slower than it count as a tie, and the
most accurate of those wins: fp32 stays unless another path is more than 5% faster (timing noise never buys a loss
of accuracy), and of two paths about as fast the more accurate is taken. Available paths: fp32 always; bf16 only
where bfloat16 products run in hardware (:func:`ctxemb.core.precision.cpu_has_native_bf16`, or a CUDA GPU that supports
bf16) since emulated bf16 is several times slower; int8 and the ONNX paths on the CPU only, the ONNX ones where
onnxruntime is installed.

While it probes, one line at WARNING says what it measures and about how long it takes, and a progress bar runs on
stderr when stderr is a terminal.

The result is cached in a small JSON file, ``$CTXEMB_CACHE/autoprecision/<model>-<key>.json``, written atomically;
the key covers the CPU (model name and flags), whether it has native bf16, the GPU name if any, the torch thread
count, the torch, onnxruntime and ctxemb versions, the model (a fingerprint of its configuration and weights) and the
layers probed. Any change of these probes again. Every probe is cached with its **margin** (the least relative change
of one path's speed that would change the choice, :func:`decision_margin`) and its **noise** (how much a path's
second-best timed round took longer than its best, the largest over the paths, at least :data:`NOISE_FLOOR`). A choice is **provisional** when the machine was busy (its
1-minute load average above the CPU count plus one, at the start or the end of the probe: a probe at load 10 once
timed int8 below fp32 and cached a slower path for good) or when its margin is within its noise. A later process
uses a provisional choice while the machine is busy, and probes again once it is quiet, replacing the entry (at most
:data:`MAX_PROBES` probes per entry: a close call stays close). ``CTXEMB_REPROBE=1`` in the environment, or
``choose_precision(..., reprobe=True)``, probes again whatever the cache holds; :func:`clear_cache` deletes cached
choices.

Shapes: W words of the probe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ctxemb.core import precision as _precision
from ctxemb._version import __version__
from ctxemb.runtime.backends import encoder_fingerprint, load_backend, onnxruntime_version
from ctxemb.runtime.engine import EncoderBackend, pool_subwords, run_encoder
from ctxemb.modeling.encoder import Encoder
from ctxemb.core.precision import ACCURACY_BOUNDS, INFERENCE_PRECISIONS as PRECISIONS
from ctxemb.core.validation import read_json_file
from ctxemb.core.atomic import atomic_write
from ctxemb.models.hub import cache_dir
from ctxemb.models.tokenization import Tokenizer

logger = logging.getLogger(__name__)

# Bumped whenever the probe (text, batches, statistic) or a path's kernel changes, so that cached choices are made
# again (2: int8 with one activation scale per token instead of one per batch; 3, 4: outlier features in float32;
# 5: the fused int8 kernel with outlier features calibrated once per model; 6: the least mean cosine 0.999; 7: 7-bit
# int8 weights where the CPU's int8 products are not exact with 8, quantization.weight_levels; 8: asymmetric int8
# activations, a zero point per token; 9: the native AVX512-VNNI int8 kernel, ctxemb.runtime.kernels; 10: the int8
# path's native attention, bf16 products where the CPU has AVX512-BF16, outputs quantized by their producer).
_PROBE_VERSION = 10
PROBE_BATCH_SIZE = 16
#: The least per-word cosine to the exact vectors any path must keep on the probe (besides its mean bound).
LEAST_WORD_COSINE = 0.99
#: The least mean per-word cosine to the exact vectors a path must reach for ``auto`` to choose it, whatever its own
#: (looser) bound in :data:`ctxemb.core.precision.ACCURACY_BOUNDS`: the default path may cost speed, not accuracy.
LEAST_MEAN_COSINE = 0.999
#: The least noise a probe's timings are credited with (relative): repeated probes on a quiet machine differ by this.
NOISE_FLOOR = 0.02
#: The most probes one cache entry gets: a provisional choice is probed again by later quiet processes until then.
MAX_PROBES = 3
#: Set to anything but "" or "0" to probe again whatever the cache holds (the new result replaces the cached one).
REPROBE_ENV = "CTXEMB_REPROBE"

PROBE_SENTENCES: tuple[str, ...] = (
    "The central bank raised its benchmark rate by a quarter of a percentage point on Wednesday , the third increase "
    "this year , citing persistent inflation in services and housing .",
    "She sat on the bank of the river and watched the boats drift past .",
    "Mitochondria generate most of the chemical energy needed to power the cell 's biochemical reactions .",
    "Preheat the oven to 220 degrees , brush the pastry with beaten egg and bake for twenty-five minutes .",
    "\" I don't think that 's what he meant , \" Margaret said , folding the letter twice before slipping it into her "
    "coat .",
    "The committee postponed its decision .",
    "In 1848 , revolutions swept through France , the German states , the Austrian Empire and much of Italy , though "
    "most of them were suppressed within two years .",
    "Researchers at the university reported that the antibody neutralised all twelve variants tested in the "
    "laboratory .",
    "Turn left at the second roundabout and follow the signs for the railway station .",
    "The defendant 's lawyers argued that the evidence had been obtained without a valid warrant and should be "
    "excluded .",
    "Photosynthesis converts light energy into chemical energy stored in glucose .",
    "After three seasons in the lower divisions , the club won promotion with a dramatic victory on the final day .",
    "A bat flew out of the cave at dusk , followed by hundreds more .",
    "He swung the bat and the ball sailed over the fence .",
    "The software update fixes a vulnerability that allowed attackers to execute arbitrary code remotely .",
    "Glaciers in the Himalaya have lost roughly a quarter of their ice mass since the 1970s , according to satellite "
    "measurements published last month .",
    "Please return the signed form by Friday .",
    "The orchestra opened with an overture by Rossini before the soloist joined them for Tchaikovsky 's violin "
    "concerto .",
    "Unemployment fell to 4.1 per cent , its lowest level in nearly two decades , while wages grew faster than "
    "prices .",
    "The plant closed in 2009 and the town never recovered .",
    "Water the plant once a week and keep it away from direct sunlight .",
    "Archaeologists uncovered a Roman mosaic depicting Neptune beneath a car park in the city centre .",
    "The prime minister 's spokesman declined to comment on reports of a cabinet reshuffle .",
    "Most mammals have seven cervical vertebrae , including giraffes , whose necks can exceed two metres .",
    "Her grandmother had emigrated from Naples with nothing but a suitcase and an address written on a scrap of "
    "paper , and she spoke of the crossing only once .",
    "The algorithm sorts the input in linear time when the keys are small integers .",
    "Heavy rain is expected across the north-west tonight , with localised flooding possible on low-lying roads .",
    "Shares in the company slumped after it warned that profits would be lower than expected .",
    "Who left the door open ?",
    "The novel follows a young cartographer who is sent to map an island that does not appear on any chart .",
    "Insulin resistance is a key feature of type 2 diabetes and is closely linked to obesity and physical "
    "inactivity .",
    "The bridge , completed in 1932 , carries six lanes of traffic and two railway tracks across the harbour .",
    "Negotiators worked through the night but failed to agree on the wording of the final communique .",
    "Add the onions , garlic and a pinch of salt , then cook gently until soft but not browned .",
    "The telescope 's mirror was polished to an accuracy of a few nanometres .",
    "Volunteers planted more than ten thousand trees along the river last spring .",
    "The mouse ran under the sofa when the cat came in .",
    "Click the mouse twice to open the file .",
    "Several witnesses described hearing a loud bang shortly before midnight , followed by the sound of breaking "
    "glass and shouting in the street outside the pub .",
    "The treaty established a customs union and a common external tariff among the six founding members .",
    "Quantum entanglement links the states of two particles so that measuring one instantly constrains the other .",
    "The museum is closed on Mondays .",
    "During the long winter of 1709 , the lagoon froze solid and merchants walked across the ice to the mainland , "
    "carrying wine and salted fish to sell in the markets of the neighbouring towns .",
    "The referee awarded a penalty after a lengthy review , to the fury of the home supporters .",
    "Enzymes lower the activation energy of reactions without being consumed in the process .",
    "The startup raised 40 million dollars in a funding round led by two venture capital firms .",
    "They spent the afternoon arguing about whether the painting was a forgery .",
    "The cell was cold , damp and lit by a single bulb that flickered all night .",
)


@dataclass(frozen=True)
class ProbeResult:
    """How one path did on the probe.

    Attributes:
        precision: the path.
        tokens_per_s: probe tokens (special tokens included) per second, best round.
        cosine_mean: mean per-word cosine to the exact vectors (1.0 for fp32 itself).
        cosine_min: the smallest per-word cosine.
        bound: the least ``cosine_mean`` the path must reach.
        passed: ``cosine_mean >= bound`` and ``cosine_min >= LEAST_WORD_COSINE``.
        setup_seconds: time to build the backend (quantizing; exporting or loading the ONNX file).
        noise: how much its second-best timed round took longer than its best, relative (0 with one round).
    """

    precision: str
    tokens_per_s: float
    cosine_mean: float
    cosine_min: float
    bound: float
    passed: bool
    setup_seconds: float
    noise: float = 0.0


@dataclass
class PrecisionChoice:
    """What ``precision="auto"`` chose and why.

    Attributes:
        precision: the chosen path (one of :data:`ctxemb.core.precision.INFERENCE_PRECISIONS`).
        results: each probed path's :class:`ProbeResult`.
        skipped: paths not probed here, with the reason (e.g. no native bf16, onnxruntime missing).
        machine: the CPU (and GPU) the choice was made on.
        cache_file: the JSON file that holds the choice (None when caching was off).
        from_cache: the choice was read from ``cache_file`` rather than probed now.
        backend: the chosen path's backend when it was built by the probe (not cached).
        margin: :func:`decision_margin` of the results (None: no other path passed, nothing could change it).
        noise: the probe's timing noise: the largest noise of a passing path's rounds (:attr:`ProbeResult.noise`),
            at least :data:`NOISE_FLOOR`.
        busy: the machine was busy while it probed (its load average above :func:`busy_load`).
        load: the highest 1-minute load average read around the probe.
        probes: how many probes the cache entry has had (a provisional one is probed again, up to
            :data:`MAX_PROBES`).
    """

    precision: str
    results: dict[str, ProbeResult]
    skipped: dict[str, str]
    machine: str
    cache_file: Path | None = None
    from_cache: bool = False
    backend: EncoderBackend | None = field(default=None, repr=False, compare=False)
    margin: float | None = None
    noise: float = NOISE_FLOOR
    busy: bool = False
    load: float = 0.0
    probes: int = 1

    @property
    def provisional(self) -> bool:
        """Made on a busy machine, or within its noise: a later process probes again when the machine is quiet."""
        return self.busy or (self.margin is not None and self.margin <= self.noise)

    @property
    def reason(self) -> str:
        """Why the choice is provisional ("" when it is final)."""
        if self.busy:
            return f"the machine was busy: load average {self.load:.1f} on {os.cpu_count() or 1} CPUs"
        if self.provisional:
            return (f"a close call: one path {1 + self.margin:.3f}x faster or slower would change it, within the "
                    f"probe's timing noise of {self.noise:.1%}")
        return ""

    def assess(self, min_speedup: float = 1.05) -> "PrecisionChoice":
        """Set :attr:`margin` and :attr:`noise` from :attr:`results`; returns self."""
        self.margin = decision_margin(self.results, min_speedup)
        self.noise = max([NOISE_FLOOR] + [r.noise for r in self.results.values() if r.passed])
        return self

    def summary(self) -> str:
        """One line: the choice, its speed-up over fp32 and its accuracy on the probe."""
        chosen, exact = self.results.get(self.precision), self.results.get("fp32")
        text = f"precision='auto' chose {self.precision!r} on {self.machine}"
        if chosen is not None and exact is not None and self.precision != "fp32":
            text += (f": {chosen.tokens_per_s:,.0f} tokens/s vs fp32 {exact.tokens_per_s:,.0f} "
                     f"({chosen.tokens_per_s / exact.tokens_per_s:.2f}x), per-word cosine to exact "
                     f"{chosen.cosine_mean:.4f} (bound {chosen.bound})")
        others = ", ".join(f"{p} {r.tokens_per_s:,.0f} tok/s cos {r.cosine_mean:.4f}{'' if r.passed else ' (fails)'}"
                           for p, r in self.results.items() if p != self.precision)
        if others:
            text += f"; also probed: {others}"
        if self.skipped:
            text += "; skipped: " + "; ".join(f"{p} ({why})" for p, why in self.skipped.items())
        if self.provisional:
            text += f"; provisional ({self.reason})"
        return text + (f" [cached in {self.cache_file}]" if self.from_cache else "")

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision, "machine": self.machine, "skipped": dict(self.skipped),
                "results": {p: dataclasses.asdict(r) for p, r in self.results.items()},
                "status": "provisional" if self.provisional else "final", "reason": self.reason,
                "margin": self.margin, "noise": self.noise, "busy": self.busy, "load": self.load,
                "probes": self.probes}


def available_precisions(device: torch.device) -> tuple[list[str], dict[str, str]]:
    """The paths worth probing on ``device``, and the others with the reason they are left out."""
    candidates, skipped = ["fp32"], {}
    if device.type == "cpu":
        native = _precision.cpu_has_native_bf16()
        if native is True:
            candidates.append("bf16")
        else:
            skipped["bf16"] = ("this CPU does not multiply bfloat16 in hardware (no AVX512-BF16 or AMX): emulated bf16 "
                               "is several times slower than fp32" if native is False
                               else "unknown whether this CPU has hardware bfloat16 (no /proc/cpuinfo flags)")
        candidates.append("int8")
        if onnxruntime_version() is not None:
            candidates += ["onnx-fp32", "onnx-int8"]
        else:
            skipped["onnx-fp32"] = skipped["onnx-int8"] = "onnxruntime is not installed (pip install 'ctxemb[onnx]')"
    else:
        native, fact = _precision.native_bf16(device)
        if native:
            candidates.append("bf16")
        else:
            skipped["bf16"] = f"no hardware bfloat16 on {device}: {fact}"
        for p in ("int8", "onnx-fp32", "onnx-int8"):
            skipped[p] = "runs on the CPU only"
    return candidates, skipped


def machine_description(device: torch.device) -> str:
    info = _precision.cpu_info()
    text = f"{info.name} ({torch.get_num_threads()} threads)"
    if device.type == "cuda":
        text += f", {torch.cuda.get_device_name(device)}"
    return text


def cache_key(encoder: Encoder, layers: Sequence[int], fingerprint: str) -> dict[str, Any]:
    """Everything a cached choice depends on (see the module docstring)."""
    device = next(encoder.parameters()).device
    info = _precision.cpu_info()
    return {"probe": _PROBE_VERSION, "cpu": info.name, "cpu_flags": sorted(info.flags),
            "native_bf16": _precision.cpu_has_native_bf16(), "device": device.type,
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "threads": torch.get_num_threads(), "torch": torch.__version__, "onnxruntime": onnxruntime_version(),
            "ctxemb": __version__, "model": fingerprint, "layers": [int(i) for i in layers]}


def cache_file_for(key: dict[str, Any], model_name: str | None) -> Path:
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=8).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model_name).name if model_name else "model").strip("._") or "model"
    return cache_dir() / "autoprecision" / f"{name}-{digest}.json"


def choose_precision(encoder: Encoder, tokenizer: Tokenizer, *, layers: Sequence[int] = (-4, -3, -2, -1),
                     model_name: str | None = None, use_cache: bool = True, fingerprint: str | None = None,
                     repeats: int = 3, min_speedup: float = 1.05, reprobe: bool | None = None) -> PrecisionChoice:
    """Pick the fastest path within its accuracy bound for ``encoder`` on this machine (see the module docstring).

    Args:
        encoder, tokenizer: the model.
        layers: hidden-state indices whose mean the probe compares (0 = embedding output, -1 = last layer).
        model_name: a readable name for the cache files and logs.
        use_cache: read and write the cached choice.
        fingerprint: :func:`ctxemb.runtime.backends.encoder_fingerprint` of ``encoder`` if already known.
        repeats: timed rounds per path.
        min_speedup: paths within this factor of the fastest passing path are a tie, which the most accurate wins.
        reprobe: probe again even if a choice is cached, and replace it; None: when the environment variable
            ``CTXEMB_REPROBE`` is set (to anything but "" or "0").

    Returns:
        The :class:`PrecisionChoice` (logged at INFO; a probe's outcome at WARNING).
    """
    resolved = encoder.resolve_layers(list(layers))
    fingerprint = fingerprint or encoder_fingerprint(encoder)
    key = cache_key(encoder, resolved, fingerprint)
    path = cache_file_for(key, model_name) if use_cache else None
    if reprobe is None:
        reprobe = os.environ.get(REPROBE_ENV, "") not in ("", "0")
    probes = 1
    if path is not None and not reprobe:
        cached = _read_cached(path, key, min_speedup)
        if cached is not None:
            if not cached.provisional or cached.probes >= MAX_PROBES:
                logger.info(cached.summary())
                return cached
            load = _load_average()
            if load > busy_load():
                logger.info("%s; the machine is busy now (load average %.1f): used as it is, and probed again when "
                            "it is quiet", cached.summary(), load)
                return cached
            logger.warning("the cached precision choice %r is provisional (%s) and the machine is quiet now: "
                           "probing again", cached.precision, cached.reason)
            probes = cached.probes + 1
    load_before = _load_average()
    choice = probe_precisions(encoder, tokenizer, layers=resolved, model_name=model_name, fingerprint=fingerprint,
                              repeats=repeats, min_speedup=min_speedup)
    choice.load = max(load_before, _load_average())
    choice.busy, choice.probes = choice.load > busy_load(), probes
    choice.assess(min_speedup)
    if path is not None:
        try:
            with atomic_write(path) as f:
                json.dump({"key": key, "model_name": model_name, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           **choice.to_dict()}, f, indent=1)
            choice.cache_file = path
        except OSError as e:  # a read-only cache costs a probe per process, nothing else
            logger.warning("could not cache the precision choice in %s: %s", path, e)
    logger.info(choice.summary())
    logger.warning(_outcome(choice))
    return choice


def _outcome(choice: PrecisionChoice) -> str:
    """The line that closes a probe: the choice, its speed-up, where it is cached and whether it is final."""
    chosen, exact = choice.results.get(choice.precision), choice.results.get("fp32")
    text = f"precision='auto' chose {choice.precision!r}"
    if chosen is not None and exact is not None and choice.precision != "fp32":
        text += f" ({chosen.tokens_per_s / exact.tokens_per_s:.2f}x as fast as fp32 here)"
    if choice.cache_file is not None:
        text += f"; cached in {choice.cache_file}"
    if choice.provisional:
        text += (f", as provisional ({choice.reason}): a later process probes again when the machine is quiet"
                 if choice.cache_file is not None else f"; provisional ({choice.reason})")
    return text


def decision_margin(results: dict[str, ProbeResult], min_speedup: float = 1.05) -> float | None:
    """The least factor by which one passing path's speed must grow or shrink to change :func:`select_precision`'s
    choice, as a relative excess (0.1: one path 1.1x faster, or 1.1x slower, would change it); None when fewer than
    two paths passed (no speed changes it).

    The choice changes only where one path's speed crosses another's, times 1, ``min_speedup`` or its inverse;
    those factors are tried in order of size."""
    passing = {p: r for p, r in results.items() if r.passed}
    if len(passing) < 2:
        return None
    chosen = select_precision(results, min_speedup)
    factors = sorted({(p, other.tokens_per_s * m / r.tokens_per_s) for p, r in passing.items()
                      for q, other in passing.items() if q != p for m in (1.0, min_speedup, 1.0 / min_speedup)},
                     key=lambda pf: abs(math.log(pf[1])))
    for p, factor in factors:
        beyond = factor * (1 + 1e-9) if factor >= 1 else factor * (1 - 1e-9)  # just past the crossing
        changed = {**results, p: dataclasses.replace(results[p], tokens_per_s=results[p].tokens_per_s * beyond)}
        if select_precision(changed, min_speedup) != chosen:
            return math.exp(abs(math.log(factor))) - 1.0
    return None


def clear_cache(model_name: str | None = None) -> list[Path]:
    """Delete the cached choices of ``precision="auto"`` (those made for ``model_name``, or all), so that the next
    ``auto`` probes again; the int8 calibrations cached beside them are kept. Returns the files deleted."""
    deleted = []
    for path in sorted((cache_dir() / "autoprecision").glob("*.json")):
        try:
            data = read_json_file(path, "cached precision choice")
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or "results" not in data or "key" not in data:
            continue  # not a choice (an int8 calibration)
        if model_name is None or data.get("model_name") == model_name:
            path.unlink(missing_ok=True)
            deleted.append(path)
    return deleted


def probe_precisions(encoder: Encoder, tokenizer: Tokenizer, *, layers: Sequence[int],
                     candidates: Sequence[str] | None = None, model_name: str | None = None,
                     fingerprint: str | None = None, repeats: int = 3, min_speedup: float = 1.05) -> PrecisionChoice:
    """Run the probe over ``candidates`` (default: :func:`available_precisions`) and choose; no cache. Announces
    itself at WARNING (what it measures, about how long) and shows a progress bar on a terminal."""
    from tqdm import tqdm

    device = next(encoder.parameters()).device
    available, skipped = available_precisions(device)
    candidates = list(available if candidates is None else candidates)
    for p in candidates:
        if p not in PRECISIONS:
            raise ValueError(f"candidates must be among {PRECISIONS}, got {p!r}")
    candidates = ["fp32"] + [p for p in candidates if p != "fp32"]  # the reference, measured first
    items = tokenizer.tokenize_words([s.split() for s in PROBE_SENTENCES])
    n_tokens = sum(len(it.ids) + tokenizer.num_special_tokens for it in items)

    def build(p: str) -> EncoderBackend:
        start = time.perf_counter()
        backend = load_backend(encoder, p, model_name=model_name, fingerprint=fingerprint, tokenizer=tokenizer)
        setup[p] = time.perf_counter() - start
        return backend

    setup: dict[str, float] = {}
    backends = {"fp32": build("fp32")}
    start = time.perf_counter()
    vectors = {"fp32": _probe_pass(encoder, tokenizer, items, layers, backends["fp32"])}  # warm-up and reference
    steps = len(candidates) * (1 + max(1, repeats)) - 1  # passes still to run
    where = "this CPU" if device.type == "cpu" else str(device)
    logger.warning("precision='auto': measuring %s on %s%s (about %.0f s; cached afterwards)", ", ".join(candidates),
                   where, f" for {model_name}" if model_name else "", (time.perf_counter() - start) * steps)
    bar = tqdm(total=steps + len(candidates) - 1, desc="precision auto", unit="step", disable=None, leave=False)
    for p in candidates[1:]:
        try:
            backends[p] = build(p)
        except Exception as e:  # noqa: BLE001  (a path that cannot be built here is skipped, with the reason)
            skipped[p] = f"could not be built here: {type(e).__name__}: {e}"
            logger.warning("precision probe: %s skipped: %s", p, skipped[p])
        bar.update()
    for p, backend in list(backends.items())[1:]:  # warm-up pass; its vectors are the ones compared
        try:
            vectors[p] = _probe_pass(encoder, tokenizer, items, layers, backend)
        except Exception as e:  # noqa: BLE001
            skipped[p] = f"failed on the probe: {type(e).__name__}: {e}"
            logger.warning("precision probe: %s skipped: %s", p, skipped[p])
            del backends[p]
        bar.update()
    rounds: dict[str, list[float]] = {p: [] for p in backends}
    for _ in range(max(1, repeats)):
        for p, backend in backends.items():
            start = time.perf_counter()
            _probe_pass(encoder, tokenizer, items, layers, backend)
            rounds[p].append(time.perf_counter() - start)
            bar.update()
    bar.close()

    results = {}
    for p in backends:
        cos = F.cosine_similarity(vectors[p].double(), vectors["fp32"].double(), dim=-1)
        bound = ACCURACY_BOUNDS[p] if p == "fp32" else max(ACCURACY_BOUNDS[p], LEAST_MEAN_COSINE)
        mean = 1.0 if p == "fp32" else float(cos.mean())
        best = min(rounds[p])
        results[p] = ProbeResult(precision=p, tokens_per_s=n_tokens / best, cosine_mean=mean,
                                 cosine_min=1.0 if p == "fp32" else float(cos.min()), bound=bound,
                                 passed=mean >= bound and (p == "fp32" or float(cos.min()) >= LEAST_WORD_COSINE),
                                 setup_seconds=setup[p], noise=_spread(rounds[p]))
    chosen = select_precision(results, min_speedup)
    return PrecisionChoice(precision=chosen, results=results, skipped=skipped, machine=machine_description(device),
                           backend=backends[chosen]).assess(min_speedup)


def _spread(seconds: Sequence[float]) -> float:
    """The noise of a best-of-rounds time: how much the second-best round took longer than the best (relative; 0 for
    one round). A round slowed by a passing job does not count; two rounds that disagree do."""
    fastest = sorted(seconds)[:2]
    return (fastest[-1] - fastest[0]) / fastest[0]


def _load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def busy_load() -> float:
    """The load average above which a probe is provisional: the CPU count plus one (the probe's own threads fit)."""
    return (os.cpu_count() or 1) + 1.0


def select_precision(results: dict[str, ProbeResult], min_speedup: float = 1.05) -> str:
    """The fastest path that passed its bound; paths within ``min_speedup`` of it are a tie (timing noise), which
    the most accurate wins. fp32 always passes, so there is always a choice."""
    passing = [r for r in results.values() if r.passed]
    fastest = max(r.tokens_per_s for r in passing)
    return max((r for r in passing if r.tokens_per_s * min_speedup >= fastest),
               key=lambda r: (r.cosine_mean, r.tokens_per_s)).precision


def _probe_pass(encoder: Encoder, tokenizer: Tokenizer, items, layers: Sequence[int],
                backend: EncoderBackend) -> torch.Tensor:
    """(W, H) word vectors of the probe: mean of ``layers``, subwords averaged."""
    words: list[torch.Tensor | None] = [None] * len(items)
    for i, states in run_encoder(encoder, tokenizer, items, layers=layers, reduce_layers=lambda s: s.mean(dim=2),
                                 backend=backend, batch_size=PROBE_BATCH_SIZE, max_tokens_per_batch=None):
        words[i] = pool_subwords(states[1:-1], items[i].word_spans)
    return torch.cat(words)  # type: ignore[arg-type]


def _read_cached(path: Path, key: dict[str, Any], min_speedup: float) -> PrecisionChoice | None:
    """The cached choice at ``path`` if it exists and was made under ``key``; a damaged file is reported and probed
    again. The choice (and its margin) is made again from the cached measurements, so that it follows
    ``min_speedup`` and the current rule; whether the machine was busy is as recorded."""
    if not path.is_file():
        return None
    try:
        data = read_json_file(path, "cached precision choice")
        if data.get("key") != key:
            return None
        results = {p: ProbeResult(**r) for p, r in data["results"].items()}
        if "fp32" not in results or any(p not in PRECISIONS for p in results):
            raise ValueError(f"its results name {sorted(results)}; expected fp32 and paths among {PRECISIONS}")
        precision = select_precision(results, min_speedup)
        choice = PrecisionChoice(precision=precision, results=results, skipped=dict(data.get("skipped", {})),
                                 machine=str(data["machine"]), cache_file=path, from_cache=True,
                                 busy=bool(data.get("busy", False)), load=float(data.get("load", 0.0)),
                                 probes=int(data.get("probes", 1)))
        return choice.assess(min_speedup)  # margin and noise as the current rule sees the cached measurements
    except (ValueError, KeyError, TypeError) as e:
        logger.warning("ignoring the cached precision choice %s (%s); probing again", path, e)
        return None
