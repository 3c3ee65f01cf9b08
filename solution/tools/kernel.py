"""The Kaggle notebook job: the pipeline (fit or load the five collections, predict, submit) with Kaggle's
paths and a time budget, set through environment variables."""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path

import torch

from ..atomic import atomic_write
from ..errors import SettingsError
from ..training.module import SHIPPED, STARTS_FOLDER
from . import pipeline
from .failures import guarded
from .pipeline import Job, say
from .settings import layered, started_from

COMPETITION = "predict-ai-model-runtime"
KAGGLE_INPUT = Path("/kaggle/input")  # attached data, read-only
KAGGLE_WORKING = Path("/kaggle/working")  # the notebook's saved output
DEFAULT_BUDGET = 11 * 3600.0  # seconds of the whole job in a 12-hour session, an hour to spare
# Settings layered on each collection's settings; "smoke" is a seconds-long run for tests on a CPU.
PROFILES = {
    "kaggle": {},
    "smoke": {"trainer": {"max_epochs": 2, "check_val_every_n_epoch": 1, "num_sanity_val_steps": 0},
              "model": {"ranker": {"init_args": {"hidden": 16, "opcode_dim": 8}}, "warmup_steps": 0},
              "data": {"configs_per_graph": 8, "eval_chunk": 64, "num_workers": 0}},
}


def budget_seconds(text: str | None, default: float) -> float:
    """SOLUTION_TIME_BUDGET as a number of seconds >= 0 (`default` when unset)."""
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise SettingsError(f"SOLUTION_TIME_BUDGET={text!r}; expected a number of seconds >= 0")
    return value


def find_data_root(inputs: Path) -> Path:
    """The competition's folder under `inputs`, else the first attached input that holds npz_all/npz."""
    found = [inputs / COMPETITION] + sorted(p.parent.parent for depth in ("*", "*/*", "*/*/*")
                                           for p in inputs.glob(f"{depth}/npz_all/npz"))
    for root in found:
        if (root / "npz_all" / "npz").is_dir():
            return root
    raise FileNotFoundError(f"no TpuGraphs data under {inputs} (a folder holding npz_all/npz); attach the "
                            f"{COMPETITION} data or set SOLUTION_DATA_ROOT")


def job_from_environment(environ: Mapping[str, str]) -> tuple[Job, str]:
    """The job and profile the environment variables (SOLUTION_*) describe, with Kaggle's paths by default."""
    profile = environ.get("SOLUTION_KERNEL_PROFILE") or "kaggle"
    if profile not in PROFILES:
        raise SettingsError(f"SOLUTION_KERNEL_PROFILE={profile!r}; expected one of {', '.join(PROFILES)}")
    data, checkpoints, rankers = (environ.get(f"SOLUTION_{name}") for name in ("DATA_ROOT", "CHECKPOINTS", "RANKERS"))
    job = Job(root=Path(data) if data else find_data_root(KAGGLE_INPUT),
              output=Path(environ.get("SOLUTION_OUTPUT_DIR") or KAGGLE_WORKING),
              cache=Path(environ.get("SOLUTION_CACHE") or Path(tempfile.gettempdir()) / "solution-cache"),
              budget=budget_seconds(environ.get("SOLUTION_TIME_BUDGET"), DEFAULT_BUDGET),
              checkpoints=Path(checkpoints) if checkpoints else None, budget_source="SOLUTION_TIME_BUDGET",
              rankers=Path(rankers) if rankers else None)
    return job, profile


def main(settings: Mapping[str, Mapping], environ: MutableMapping[str, str] = os.environ,
         starts: Mapping[str, str] | None = None) -> int:
    """`run`, with each failure a user can cause told in one line and its exit code (as the `solution` command)."""
    return guarded(lambda: run(settings, environ, starts))


def run(settings: Mapping[str, Mapping], environ: MutableMapping[str, str] = os.environ,
        starts: Mapping[str, str] | None = None) -> int:
    """The whole job with `settings` (collection -> its configs/*.yaml settings) under the profile the
    environment names: train (or load) the collections, predict every test file, write a checked
    submission.csv and print the validation scores. `starts` (file name -> base64), the package's starts the
    kernel embeds, are what `model.init_from: shipped` names there."""
    job, profile = job_from_environment(environ)
    say(f"solution kernel: data {job.root}, output {job.output}, cache {job.cache}, profile {profile}, "
        f"budget {job.budget:.0f} s for the whole job, {torch.cuda.device_count()} GPU(s)")
    profiled = {c: layered(s, PROFILES[profile]) for c, s in settings.items()}
    pipeline.run(job, started(profiled, environ, starts or {}, job.cache / "starts"))
    return 0


def started(settings: Mapping[str, Mapping], environ: MutableMapping[str, str], starts: Mapping[str, str],
            folder: Path) -> dict[str, Mapping]:
    """Each collection's settings with the start of its fit: SOLUTION_INIT_FROM for every collection where set;
    else the settings as they are, and where one names `model.init_from: shipped`, the embedded starts (file name ->
    base64) written to `folder`, which SOLUTION_STARTS in `environ` then names as the package's."""
    if environ.get("SOLUTION_INIT_FROM"):
        return started_from(settings, environ["SOLUTION_INIT_FROM"])
    if starts and any(s["model"].get("init_from") == SHIPPED for s in settings.values()):
        for name, text in starts.items():
            with atomic_write(folder / name, "wb") as handle:
                handle.write(base64.b64decode(text))
        environ[STARTS_FOLDER] = str(folder)
    return dict(settings)
