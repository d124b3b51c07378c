"""Which registered version takes an alias: the trials a search picks (``choose``), the
lineage that makes two searches' models comparable (``Lineage``), and the rules by which
this search's version takes ``best-retrieval``, ``best-semantic`` or the ``pareto-K``
front, or the alias stays where it is (``decide``, ``decide_front``; the rules are
listed in ``gridsearch.registry``'s docstring). What one registration did, and the lines
that say so, is ``Registered``. No MLflow here: the registry hands in how to look up a
version that holds an alias (``holder_of``, ``tags_of``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gridsearch._outcome import Outcome
from gridsearch.summary import TrialOutcome, best_trial, pareto_front
from trainables import names

__all__ = [
    "BEST_ALIASES",
    "PARETO",
    "PARETO_ALIAS",
    "SEMANTIC_TAG",
    "SMOKE_TAG",
    "STORE_TAG",
    "Holder",
    "Lineage",
    "Registered",
    "choose",
    "decide",
    "decide_front",
    "number",
    "verdict",
]

BEST_ALIASES = {"best-retrieval": names.BEST_RETRIEVAL, "best-semantic": names.BEST_SEMANTIC}
PARETO_ALIAS = "pareto-{}"  # 1-based, by dev R@10 mean, best first
STORE_TAG = "data_manifest_sha256"
SEMANTIC_TAG = "semantic_sets"
SMOKE_TAG = "smoke_test"
_LABELS = {"best-retrieval": "dev R@10 mean", "best-semantic": "dev semantic"}
PARETO = PARETO_ALIAS.format("")


def choose(outcomes: Sequence[TrialOutcome], objective: str) -> dict[str, TrialOutcome]:
    """The trial each alias names: the best finished trial per objective, and for
    ``objective == "both"`` each finished trial on the Pareto front."""
    finished = [o for o in outcomes if o.status == Outcome.FINISHED.value]
    picks = {}
    for alias, metric in BEST_ALIASES.items():
        best = best_trial(finished, names.selectable(metric))
        if best is not None:
            picks[alias] = best
    if objective == "both":
        front = pareto_front([(o.retrieval, o.semantic) for o in finished])
        picks.update({PARETO_ALIAS.format(k): finished[i] for k, i in enumerate(front, 1)})
    return picks


@dataclass(frozen=True)
class Lineage:
    """What makes two searches' models comparable on their dev values: the store they
    trained and were evaluated on (its manifest's sha256), the semantic sets (the store's
    own, or a ``--senteval`` folder), the objective they were searched for; and whether
    the search was a ``--smoke-test`` (the same path, tiny: never the best of a real
    search)."""

    experiment: str
    store: str
    semantic: str
    objective: str
    smoke_test: bool

    def tags(self) -> dict[str, str]:
        return {
            STORE_TAG: self.store,
            SEMANTIC_TAG: self.semantic,
            "objective": self.objective,
            SMOKE_TAG: str(self.smoke_test).lower(),
        }

    def unlike(self, other: Lineage) -> str | None:
        """Why ``other``'s models cannot be compared with this search's, or None."""
        if other.store != self.store:
            return (
                f"trained on another store (data manifest sha256 {other.store[:12]}, this "
                f"search's {self.store[:12]}): dev values of two stores are not comparable"
            )
        if other.semantic != self.semantic:
            return (
                f"evaluated on other semantic sets ({other.semantic}, this search's "
                f"{self.semantic}): their dev semantic scores are not comparable"
            )
        if other.objective != self.objective:
            return f"searched for objective {other.objective}, this search for {self.objective}"
        return None


@dataclass
class Registered:
    """What one registration did: this search's version per alias it picked
    (``versions``), the aliases they took (``taken``), and where each other alias
    stayed and why (``kept``: alias -> (version, why))."""

    versions: dict[str, str]
    taken: dict[str, str] = dataclasses.field(default_factory=dict)
    kept: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)  # alias -> how it moved
    front: str | None = None  # why the pareto aliases moved, when they did

    def keep_front(self, front: Mapping[str, str], mine: Sequence[str], why: str) -> None:
        """The pareto aliases stay as they are (``front``; this search's beyond it stay
        unset)."""
        for alias in sorted({*front, *mine}, key=_pareto_number):
            self.kept[alias] = (front.get(alias, ""), why)

    def lines(self, name: str, picks: Mapping[str, TrialOutcome]) -> list[str]:
        """What was registered, where each alias is now, and why where that is news."""
        chosen = {version: alias for alias, version in reversed(self.versions.items())}
        lines = []
        for version in sorted({v for v in self.taken.values() if v in chosen}, key=int):
            aliases = [a for a, v in self.taken.items() if v == version]
            trial = picks[chosen[version]].trial_id
            lines.append(
                f"registered models:/{name}@{aliases[0]} (version {version}, trial {trial})"
            )
            if len(aliases) > 1:
                lines.append(f"  also {', '.join(aliases[1:])}")
            lines += [f"  {self.notes[a]}" for a in aliases if a in self.notes]
        if self.front is not None:
            front = sorted((a for a in self.taken if a.startswith(PARETO)), key=_pareto_number)
            listed = ", ".join(f"@{a} version {self.taken[a]}" for a in front)
            lines.append(f"  {self.front}: {listed}")
        by_why: dict[str, list[tuple[str, str]]] = {}
        for alias, (version, why) in self.kept.items():
            by_why.setdefault(why, []).append((alias, version))
        for why, kept in by_why.items():
            mine = [a for a, _ in kept if a in self.versions]
            versions = sorted({self.versions[a] for a in mine}, key=int)
            where = ", ".join(f"@{a} at version {v}" if v else f"@{a} unset" for a, v in kept)
            lines.append(
                f"registered version(s) {', '.join(versions)} of models:/{name} (this "
                f"search's {', '.join(mine)}); the aliases stay ({where}): {why}"
            )
        return lines


@dataclass(frozen=True)
class Holder:
    version: str
    tags: Mapping[str, str]
    lineage: Lineage


HolderOf = Callable[[str], Holder]  # a version -> it, holding an alias, with its lineage
TagsOf = Callable[[str], Mapping[str, str]]  # a version -> its tags


def decide(
    alias: str,
    lineage: Lineage,
    picks: Mapping[str, TrialOutcome],
    held: Mapping[str, str],
    registered: Registered,
    holder_of: HolderOf,
) -> None:
    """``best-retrieval`` or ``best-semantic``: this search's version takes it, or
    it stays where it is (``registered.kept``, with why)."""
    version = registered.versions[alias]
    holder = held.get(alias)
    if holder is None:
        registered.taken[alias] = version
        return
    holding = holder_of(holder)
    take, why = verdict(lineage, holding)
    if take is None:  # comparable, from another search: the better dev value wins
        metric = BEST_ALIASES[alias]
        mine = float(picks[alias].metrics.get(metric, float("nan")))
        theirs = number(holding.tags.get(metric))
        label = _LABELS[alias]
        if theirs is not None and not mine > theirs:
            take, why = (
                False,
                (
                    f"its {label} {theirs:.4g} (search {holding.lineage.experiment!r}) is at "
                    f"least this search's best, {mine:.4g}"
                ),
            )
        else:
            take = True
            was = "no value" if theirs is None else f"{theirs:.4g}"
            why = f"better {label} than version {holder}'s ({mine:.4g} > {was})"
    if take:
        registered.taken[alias] = version
        registered.notes[alias] = f"@{alias} was at version {holder}: {why}"
    else:
        registered.kept[alias] = (holder, why)


def decide_front(
    lineage: Lineage,
    picks: Mapping[str, TrialOutcome],
    held: Mapping[str, str],
    registered: Registered,
    holder_of: HolderOf,
    tags_of: TagsOf,
) -> None:
    """The ``pareto-K`` aliases, as one: this search's front takes them, or the front
    of its models and those of the comparable search that holds them does, or they
    stay (``registered.front``: why they moved, when they did)."""
    mine = sorted((a for a in picks if a.startswith(PARETO)), key=_pareto_number)
    if not mine:
        return
    front = {a: v for a, v in held.items() if a.startswith(PARETO)}
    first = front.get(PARETO_ALIAS.format(1)) or next(iter(front.values()), None)
    if first is None:
        registered.taken.update({a: registered.versions[a] for a in mine})
        return
    holding = holder_of(first)
    take, why = verdict(lineage, holding)
    if take is False:
        registered.keep_front(front, mine, why)
        return
    if take:  # this search's front replaces the one held
        registered.taken.update({a: registered.versions[a] for a in mine})
        registered.front = f"the pareto aliases were {why}"
        return
    # comparable, from another search: the front of both fronts' models
    candidates = {registered.versions[a]: (picks[a].retrieval, picks[a].semantic) for a in mine}
    for version in front.values():
        tags = tags_of(version)
        r10 = number(tags.get(names.BEST_RETRIEVAL))
        semantic = number(tags.get(names.BEST_SEMANTIC))
        if r10 is not None and semantic is not None:
            candidates[version] = (r10, semantic)
    listed = list(candidates)
    merged = [listed[i] for i in pareto_front([candidates[v] for v in listed])]
    other = holding.lineage.experiment
    if set(merged) == set(front.values()):  # the front held stands as it was
        why = (
            f"no model of this search is on the Pareto front of its models and those of "
            f"search {other!r} (version {holding.version} and the rest of the front held)"
        )
        registered.keep_front(front, mine, why)
        return
    registered.taken.update({PARETO_ALIAS.format(k): v for k, v in enumerate(merged, 1)})
    registered.front = (
        f"the pareto aliases name the Pareto front of this search's models and those of "
        f"search {other!r} (the same store, semantic sets and objective)"
    )


def verdict(lineage: Lineage, holding: Holder) -> tuple[bool | None, str]:
    """Whether this search's version takes an alias ``holding`` holds: True (with
    why), False (with why it stays), None where the two are comparable and the
    better dev value decides."""
    theirs = holding.lineage
    where = f"version {holding.version}, search {theirs.experiment!r}"
    if theirs.experiment == lineage.experiment:
        return True, f"this search's own ({where}): it ended again"
    if theirs.smoke_test and not lineage.smoke_test:
        return True, f"a --smoke-test's ({where}), which a search's models replace"
    if lineage.smoke_test and not theirs.smoke_test:
        return False, (
            f"its model is a search's ({where}); a --smoke-test's models never replace it"
        )
    why = lineage.unlike(theirs)
    if why is not None:
        return False, f"{where}: {why}"
    return None, where


def number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return None if value is None or math.isnan(value) else value


def _pareto_number(alias: str) -> int:
    return int(alias.removeprefix(PARETO_ALIAS.format("")))
