"""`solution compare`: runs x metrics from each run's summary.json (or the W&B API), means over seeds, deltas
against a baseline, as a printed table, a markdown file and a PNG chart. A run's setting is what its saved config
changes from its own collection's defaults (configs/); runs of several collections whose configs agree on all
that any of them changes are one experiment, one row across the collections."""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_write
from ..constants import COLLECTIONS
from ..errors import OK, SettingsError
from .settings import agree
from .tracking import CONFIGS, SUMMARY, changes_label, experiment_settings, setting_changes, settings_digest

LEGEND_WIDTH = 40  # characters a line of a setting's name takes in the chart's legend


@dataclass(frozen=True)
class Run:
    """One fit, as far as comparing goes."""

    name: str
    run_id: str
    collection: str
    setting: str  # what it changes from its collection's defaults, e.g. 'hidden=48,loss=listmle' or 'defaults'
    digest: str  # differs when any other setting differs
    seed: Any
    best: float  # best validation score
    last: float  # validation score at the last validation
    epochs: int
    configs_per_s: float
    peak_mib: float
    started: float  # seconds since the epoch
    source: str  # the summary file, or the W&B run path
    # its difference set (dotted key -> value; None: known by `setting` alone) and its experiment settings
    changes: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    values: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def group(self) -> str:
        return f"{self.collection} {self.setting}"

    @classmethod
    def from_config(cls, config: Mapping, configs: Path = CONFIGS, **fields: Any) -> Run:
        """A run whose setting, digest, difference set and settings come from its saved config."""
        changes = setting_changes(config, configs)
        return cls(setting=changes_label(changes), digest=settings_digest(config), changes=changes,
                   values=experiment_settings(config), **fields)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def run_from_summary(path: Path, configs: Path = CONFIGS) -> Run:
    """A run from its summary.json, its setting named from the config it saved against the collection defaults
    in `configs`; an unreadable file or a missing key names the file and the key."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SettingsError(f"{path}: not a readable run summary ({error})") from error
    keys = ("name", "run_id", "collection", "seed", "best", "last", "config")
    missing = [k for k in keys if k not in summary]
    if missing:
        raise SettingsError(f"{path}: key(s) {', '.join(missing)} missing; expected a summary written by "
                            "`solution fit`")
    perf, best, last = summary.get("perf") or {}, summary["best"] or {}, summary["last"] or {}
    return Run.from_config(summary["config"], configs, name=summary["name"], run_id=str(summary["run_id"]),
               collection=summary["collection"], seed=summary["seed"],
               best=_number(best.get("val/score")), last=_number(last.get("val/score")),
               epochs=int(summary.get("epochs") or 0), configs_per_s=_number(perf.get("perf/train_configs_per_s")),
               peak_mib=_number(perf.get("perf/peak_memory_mib")), started=_number(summary.get("started")),
               source=str(path))


def find_summaries(paths: Iterable[str | Path]) -> list[Path]:
    """summary.json files: each path is one, a run folder holding one, or a folder searched below."""
    found = []
    for path in map(Path, paths):
        if path.is_file():
            found.append(path)
        elif (path / SUMMARY).is_file():
            found.append(path / SUMMARY)
        elif path.is_dir():
            found += sorted(path.rglob(SUMMARY))
        else:
            raise FileNotFoundError(f"{path}: no such run folder or {SUMMARY}")
    return found


def runs_from_wandb(project: str, api: Any = None, configs: Path = CONFIGS) -> list[Run]:
    """The finished and running fits of a W&B project ('entity/project'), read through the W&B API (online)."""
    if api is None:
        import wandb

        api = wandb.Api()
    runs = []
    for run in api.runs(project):
        config, summary = dict(run.config), dict(run.summary)
        data = config.get("data") or {}
        if "collection" not in data:
            continue  # not a `solution fit` run
        runs.append(Run.from_config(config, configs, name=run.name, run_id=run.id, collection=data["collection"],
                        seed=config.get("seed_everything"),
                        best=_number(summary.get("val/score_best")), last=_number(summary.get("val/score")),
                        epochs=int(summary.get("epoch") or 0),
                        configs_per_s=_number(summary.get("perf/train_configs_per_s")),
                        peak_mib=_number(summary.get("perf/peak_memory_mib")),
                        started=_number(summary.get("_timestamp")), source="/".join(run.path)))
    return runs


@dataclass(frozen=True)
class Stats:
    mean: float
    std: float
    n: int

    def __str__(self) -> str:
        return "–" if self.n == 0 else f"{self.mean:.4f} ± {self.std:.4f} ({self.n})"


def stats(values: list[float]) -> Stats:
    """Mean, sample standard deviation (0 for one value) and count of the finite values."""
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return Stats(math.nan, math.nan, 0)
    return Stats(float(np.mean(finite)), float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0, len(finite))


_ABSENT = object()  # a setting a run's config does not have (e.g. a layout ranker's argument in a tile run)


def _changes(run: Run) -> Mapping[str, Any]:
    return run.changes if run.changes is not None else {"": run.setting}


def compatible(one: Run, other: Run) -> bool:
    """Whether two runs can be one experiment: on one collection, the same difference set; on two, configs that
    agree on every setting either changes from its own collection's defaults (one that a run's config does not
    have is no disagreement). Runs known by their label alone match by label."""
    if one.collection == other.collection or one.values is None or other.values is None:
        return dict(_changes(one)) == dict(_changes(other))
    for key in {**_changes(one), **_changes(other)}:
        mine, theirs = one.values.get(key, _ABSENT), other.values.get(key, _ABSENT)
        if mine is not _ABSENT and theirs is not _ABSENT and not agree(key, mine, theirs):
            return False
    return True


def experiment_changes(group: list[Run]) -> dict[str, Any]:
    """The union of a group's difference sets (its runs agree on every key of it that they have)."""
    return {k: v for run in group for k, v in _changes(run).items()}


def experiments(runs: list[Run]) -> list[list[Run]]:
    """The runs in experiments, in the order of each experiment's first run. First, runs with the same
    difference set are together, but a collection's runs whose other settings differ (digest) split into as many
    groups; then, in that order, each group joins the earlier one, of other collections only, whose every run
    it is `compatible` with (the one with the fewest changed settings together, or the earliest), where there
    is one: e.g. a tile run, whose own default an override equals, joins the layout runs of that override."""
    exact: dict[str, list[list[Run]]] = {}
    for run in runs:
        groups = exact.setdefault(json.dumps(_changes(run), sort_keys=True, default=str), [])
        for group in groups:
            digests = {r.digest for r in group if r.collection == run.collection}
            if not digests or run.digest in digests:
                group.append(run)
                break
        else:
            groups.append([run])
    first = {run: i for i, run in reversed(list(enumerate(runs)))}
    merged: list[list[Run]] = []
    for group in sorted((g for groups in exact.values() for g in groups), key=lambda g: first[g[0]]):
        collections = {r.collection for r in group}
        fits = [m for m in merged if collections.isdisjoint(r.collection for r in m)
                and all(compatible(one, other) for one in m for other in group)]
        if fits:
            min(fits, key=lambda m: len(experiment_changes(m + group))).extend(group)
        else:
            merged.append(group)
    return merged


class Comparison:
    """Runs grouped into experiments (seeds and folds together) across collections, against a baseline."""

    def __init__(self, runs: list[Run], baseline: str | None = None) -> None:
        if not runs:
            raise SettingsError("no runs to compare")
        self.runs = runs
        groups = experiments(runs)
        names = [changes_label(experiment_changes(g)) if all(r.changes is not None for r in g) else g[0].setting
                 for g in groups]
        # groups that read alike (a collection's runs that differ in unlabelled settings) are told apart by digest
        names = [f"{n} #{g[0].digest}" if names.count(n) > 1 else n for n, g in zip(names, groups)]
        names = [f"{n} ({i})" if names.count(n) > 1 else n for i, n in enumerate(names, 1)]
        self.label = {run: name for name, group in zip(names, groups) for run in group}
        self.settings = names
        self.collections = [c for c in COLLECTIONS if any(run.collection == c for run in runs)]
        self.baseline = self.resolve(baseline) if baseline else self.settings[0]
        self.table = {(s, c): stats([r.best for r in runs if self.label[r] == s and r.collection == c])
                      for s in self.settings for c in self.collections}

    def resolve(self, name: str) -> str:
        """A setting named directly, or the setting of the run with this name, id, summary path or own label."""
        if name in self.settings:
            return name
        for run in self.runs:
            if name in (run.name, run.run_id, run.source, str(Path(run.source).parent)):
                return self.label[run]
        for run in self.runs:
            if name == run.setting:
                return self.label[run]
        raise SettingsError(f"--baseline {name!r}: no such setting or run; settings: {'; '.join(self.settings)}")

    def final(self, setting: str) -> Stats:
        """The mean over collections of the setting's per-collection means (n: collections it covers)."""
        means = [self.table[setting, c].mean for c in self.collections if self.table[setting, c].n]
        return Stats(float(np.mean(means)), math.nan, len(means)) if means else Stats(math.nan, math.nan, 0)

    def final_text(self, setting: str) -> str:
        final = self.final(setting)
        covered = "" if final.n == len(self.collections) else f" ({final.n}/{len(self.collections)})"
        return _fmt(final.mean) + covered if final.n else "–"

    def delta(self, setting: str, collection: str | None) -> float:
        """Mean of `setting` minus the baseline's, on one collection or (None) the final mean where both cover
        every collection shown."""
        if collection is None:
            final, base = self.final(setting), self.final(self.baseline)
            return final.mean - base.mean if final.n == base.n == len(self.collections) else math.nan
        return self.table[setting, collection].mean - self.table[self.baseline, collection].mean

    def markdown(self) -> str:
        header = "| setting | " + " | ".join(self.collections) + " | final |"
        rule = "|---" * (len(self.collections) + 2) + "|"
        means = [header, rule] + [
            f"| {s} | " + " | ".join(str(self.table[s, c]) for c in self.collections)
            + f" | {self.final_text(s)} |" for s in self.settings]
        deltas = [header, rule] + [
            f"| {s} | " + " | ".join(_fmt(self.delta(s, c), signed=True) for c in self.collections)
            + f" | {_fmt(self.delta(s, None), signed=True)} |" for s in self.settings]
        runs = ["| run | collection | setting | seed | best | last | Δ best | epochs | configs/s | peak MiB |",
                "|---" * 10 + "|"] + [
            f"| {r.name} | {r.collection} | {self.label[r]} | {r.seed} | {_fmt(r.best)} | {_fmt(r.last)} | "
            f"{_fmt(r.best - self.table[self.baseline, r.collection].mean, signed=True)} | {r.epochs} | "
            f"{_fmt(r.configs_per_s, 0)} | {_fmt(r.peak_mib, 0)} |" for r in self.runs]
        return "\n".join([
            "# Run comparison", "",
            f"Metric: best validation score. Baseline: **{self.baseline}**. Settings are mean ± sample std over "
            "seeds (number of runs); final is the mean over collections (how many of those shown, where not all).", "",
            "## Settings", "", *means, "", "## Δ against the baseline", "", *deltas, "", "## Runs", "", *runs, ""])

    def chart(self, path: Path) -> None:
        """Grouped bars: one group per collection (and final), one bar per setting, seed spread as error bars."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        groups = [*self.collections, "final"]
        width = 0.8 / len(self.settings)
        figure, axis = plt.subplots(figsize=(1.6 + 1.5 * len(groups), 4))
        for i, setting in enumerate(self.settings):
            cells = [self.table[setting, c] for c in self.collections] + [self.final(setting)]
            axis.bar(np.arange(len(groups)) + i * width, [c.mean for c in cells], width,
                     yerr=[0 if np.isnan(c.std) else c.std for c in cells], capsize=2,
                     label=textwrap.fill(setting.replace(",", ", "), LEGEND_WIDTH))
        axis.set_xticks(np.arange(len(groups)) + width * (len(self.settings) - 1) / 2, groups, rotation=15)
        axis.set_ylabel("best validation score")
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars: labels can be long
        with atomic_write(path, "wb") as handle:
            figure.savefig(handle, format="png", dpi=90, bbox_inches="tight")
        plt.close(figure)


def _fmt(value: float, digits: int = 4, signed: bool = False) -> str:
    if not np.isfinite(value):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def select(runs: list[Run], pattern: str | None) -> list[Run]:
    """The runs whose group ('<collection> <setting>') or setting matches a glob pattern."""
    if pattern is None:
        return runs
    return [r for r in runs if fnmatch.fnmatch(r.group, pattern) or fnmatch.fnmatch(r.setting, pattern)]


def main(argv: list[str] | None = None) -> int:
    """`solution compare`: the comparison on stdout and in --out; a bad summary or --baseline raises ValueError."""
    parser = argparse.ArgumentParser(prog="solution compare", description=__doc__)
    parser.add_argument("runs", nargs="*", help="run folders, summary.json files or folders to search (default: runs)")
    parser.add_argument("--group", help="only runs whose group or setting matches this glob, e.g. 'layout:*'")
    parser.add_argument("--baseline", help="a setting, or a run's name, id or folder (default: the earliest run)")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="also read the runs of a W&B project (online)")
    parser.add_argument("--out", default="runs/compare", help="folder for compare.md and compare.png")
    args = parser.parse_args(argv)
    paths = args.runs or ([] if args.wandb else ["runs"])
    runs = [run_from_summary(p) for p in find_summaries(paths)] + (runs_from_wandb(args.wandb) if args.wandb else [])
    runs = sorted(select(runs, args.group), key=lambda r: r.started)  # the earliest run is the default baseline
    if not runs:
        parser.error(f"no runs found in {', '.join(paths) or args.wandb}"
                     + (f" matching --group {args.group!r}" if args.group else ""))
    comparison = Comparison(runs, args.baseline)
    text, out = comparison.markdown(), Path(args.out)
    with atomic_write(out / "compare.md") as handle:
        handle.write(text)
    comparison.chart(out / "compare.png")
    print(f"{text}\nwrote {out / 'compare.md'} and {out / 'compare.png'}")
    return OK
