"""Loaders for the semantic evaluation sets in SentEval's ``data/downstream`` layout.

The user passes their copy of SentEval's ``data/downstream`` directory (``--senteval``)::

    STS/STS12-en-test/STS.input.MSRpar.txt      two tab-separated sentences per line
    STS/STS12-en-test/STS.gs.MSRpar.txt         one gold score 0-5 per line; an empty
                                                line drops its pair (as SentEval does)
    STS/STS1{3..6}-en-test/...                  alike, subtasks as in ``OFFICIAL_STS``
    STS/STSBenchmark/sts-{train,dev,test}.csv   no header; field 4 = score 0-5,
                                                5 = sentence 1, 6 = sentence 2
    SICK/SICK_{train,trial,test_annotated}.txt  a header line; field 1 = sentence A,
                                                2 = sentence B, 3 = relatedness 1-5
    suite.json                                  optional: declares non-official subtasks
                                                (plain names: no '/', '..' or NUL)

Files are read as SentEval reads them (UTF-8, tab-separated, one pair per line) but
strictly: where SentEval would crash later or silently misalign, a ``StoreError`` names
the file, the line and what was expected. Sentences are kept as strings stripped of
surrounding whitespace (SentEval splits them on whitespace, so nothing it sees is lost).
One completely empty line at the end of a file is ignored.

Example (``encode`` stands for any sentence encoder)::

    from storage.senteval import load_senteval

    bench = load_senteval("SentEval/data/downstream")
    msrpar = bench.sts["STS12"]["MSRpar"]            # SentencePairs, 750 pairs
    sick_test = bench.supervised["SICK-R"].test      # 4,927 pairs, gold in [1, 5]
    vectors = {s: encode(s) for s in bench.sentences()}   # each sentence embedded once
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage._errors import MissingFileError, StoreError, describe
from storage._files import read_regular
from storage._json import parse_json, utf8_text
from storage._paths import NAME_RULE, name_problem

__all__ = [
    "OFFICIAL_STS",
    "OFFICIAL_SUPERVISED",
    "SemanticBenchmark",
    "SentencePairs",
    "Suite",
    "SupervisedTask",
    "load_senteval",
    "load_sickr",
    "load_sts_year",
    "load_stsb",
    "load_suite",
]

_log = logging.getLogger(__name__)

_STS_RANGE = (0.0, 5.0)  # STS12-16 and STS-B gold scores
_SICK_RANGE = (1.0, 5.0)  # SICK relatedness

HINT = "--senteval should point at SentEval's data/downstream directory (with STS/ and SICK/)"

OFFICIAL_STS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),  # SMT is excluded by its licence
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
OFFICIAL_SUPERVISED: tuple[str, ...] = ("STS-B", "SICK-R")


@dataclass(frozen=True)
class Suite:
    """Which tasks a directory holds."""

    name: str  # "senteval" for the official suite, else suite.json's name
    sts: dict[str, tuple[str, ...]]  # year dir prefix (e.g. "STS12") -> subtasks
    supervised: tuple[str, ...]  # subset of OFFICIAL_SUPERVISED


def check_root(root: str | os.PathLike[str]) -> Path:
    path = Path(root)
    if not path.is_dir():
        state = "is not a directory" if path.exists() else "does not exist"
        raise StoreError(f"{describe(path)}: the SentEval directory {state}; {HINT}")
    return path


def _name_list(value: Any, path: Path, field: str) -> tuple[str, ...]:
    """A non-empty list of distinct names, each usable as a file or directory name (years
    name ``STS/<year>-en-test``, subtasks ``STS.input.<subtask>.txt``)."""
    ok = isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    if not ok or len(set(value)) != len(value):
        raise StoreError(
            f"{describe(path, field=field)}: expected a non-empty list of distinct names, "
            f"got {value!r}"
        )
    for name in value:
        problem = name_problem(name)
        if problem is not None:
            raise StoreError(
                f"{describe(path, field=field)}: expected names made of {NAME_RULE} (they "
                f"become file and directory names), got {name!r}, which {problem}"
            )
    return tuple(value)


def load_suite(root: str | os.PathLike[str]) -> Suite:
    """The suite ``root/suite.json`` declares, or the official SentEval suite without one."""
    path = check_root(root) / "suite.json"
    try:
        data = read_regular(path, "the suite description")
    except MissingFileError:
        return Suite("senteval", dict(OFFICIAL_STS), OFFICIAL_SUPERVISED)
    try:
        raw = parse_json(data, describe(path))
    except StoreError as err:
        raise StoreError(f"{err}; expected a JSON object (the suite's description)") from None
    expected = {"name", "sts", "supervised"}
    if not isinstance(raw, dict) or set(raw) != expected:
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise StoreError(
            f"{describe(path)}: expected an object with exactly the fields "
            f"{sorted(expected)}, got {got}"
        )
    name, sts, supervised = raw["name"], raw["sts"], raw["supervised"]
    if not isinstance(name, str) or not name:
        where = describe(path, field="name")
        raise StoreError(f"{where}: expected a non-empty string, got {name!r}")
    if not isinstance(sts, dict):
        raise StoreError(
            f"{describe(path, field='sts')}: expected an object mapping year (e.g. 'STS12') "
            f"to a list of subtasks, got {sts!r}"
        )
    if sts:
        _name_list(list(sts), path, "sts")  # year keys name directories too
    years = {year: _name_list(subs, path, f"sts.{year}") for year, subs in sts.items()}
    known = isinstance(supervised, list) and all(s in OFFICIAL_SUPERVISED for s in supervised)
    if not known or len(set(supervised)) != len(supervised):
        raise StoreError(
            f"{describe(path, field='supervised')}: expected a list of distinct names from "
            f"{list(OFFICIAL_SUPERVISED)}, got {supervised!r}"
        )
    if not years and not supervised:
        raise StoreError(f"{describe(path)}: expected at least one task in 'sts' or 'supervised'")
    return Suite(name, years, tuple(supervised))


@dataclass(frozen=True, eq=False)
class SentencePairs:
    """Sentence pairs with one gold similarity score each."""

    name: str  # "<year>/<subtask>" for STS12-16, "<task>/<split>" for STS-B and SICK-R
    sentences1: tuple[str, ...]  # first sentence of each pair
    sentences2: tuple[str, ...]  # second sentence of each pair
    gold: np.ndarray  # float64, shape (n,), read-only

    def __post_init__(self) -> None:
        n = len(self.sentences1)
        if len(self.sentences2) != n or self.gold.shape != (n,):
            raise ValueError(
                f"SentencePairs {self.name!r}: expected {n} second sentences and gold of "
                f"shape ({n},), got {len(self.sentences2)} and {self.gold.shape}"
            )

    def __len__(self) -> int:
        return len(self.sentences1)


@dataclass(frozen=True, eq=False)
class SupervisedTask:
    """A supervised relatedness task (SentEval protocol): train, dev and test pairs."""

    name: str  # "STS-B" or "SICK-R"
    train: SentencePairs
    dev: SentencePairs
    test: SentencePairs
    score_range: tuple[float, float]  # (0, 5) for STS-B, (1, 5) for SICK-R


@dataclass(frozen=True, eq=False)
class SemanticBenchmark:
    """Everything a suite lists, loaded."""

    root: Path  # the data/downstream directory
    suite: Suite
    sts: dict[str, dict[str, SentencePairs]]  # year -> subtask -> pairs (suite order)
    supervised: dict[str, SupervisedTask]  # task name -> task (suite order)

    def sentences(self) -> list[str]:
        """Every distinct sentence once, in first-seen order (so each is embedded once)."""
        pair_sets = [p for year in self.sts.values() for p in year.values()]
        for task in self.supervised.values():
            pair_sets += [task.train, task.dev, task.test]
        seen: dict[str, None] = {}
        for pairs in pair_sets:
            for first, second in zip(pairs.sentences1, pairs.sentences2, strict=True):
                seen.setdefault(first)
                seen.setdefault(second)
        return list(seen)


def _read_lines(path: Path, needed_by: str, *, keep_empty_tail: bool = False) -> list[str]:
    """The lines of a UTF-8 text file, without line terminators (``\\n``, ``\\r\\n``, ``\\r``).

    One completely empty last line is dropped unless ``keep_empty_tail`` (gold files,
    where an empty line is an unscored pair; see ``_reconcile``).
    """
    try:
        data = read_regular(path, f"a file {needed_by} needs")
    except MissingFileError:
        raise StoreError(f"{describe(path)}: missing file, needed by {needed_by}; {HINT}") from None
    text = utf8_text(data, describe(path))
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":  # the final terminator
        lines.pop()
    if not keep_empty_tail and lines and lines[-1] == "":
        lines.pop()
    return lines


def _score(raw: str, path: Path, line: int, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not lo <= value <= hi:  # also rejects nan and unparsable text
        raise StoreError(
            f"{describe(path, line=line)}: expected a gold score in [{lo:g}, {hi:g}], got {raw!r}"
        )
    return value


def _pairs(
    name: str, s1: list[str], s2: list[str], gold: list[float], source: Path
) -> SentencePairs:
    if not gold:
        raise StoreError(f"{describe(source)}: expected at least one scored pair for {name}")
    array = np.asarray(gold, dtype=np.float64)
    array.setflags(write=False)
    return SentencePairs(name, tuple(s1), tuple(s2), array)


def _reconcile(inputs: list[str], golds: list[str], input_path: Path, gold_path: Path) -> None:
    """Drop a trailing empty gold line that has no pair; then the counts must agree."""
    if len(golds) == len(inputs) + 1 and golds[-1].strip() == "":
        golds.pop()
    if len(golds) != len(inputs):
        raise StoreError(
            f"{describe(input_path)} has {len(inputs)} lines but {describe(gold_path)} has "
            f"{len(golds)}: expected one gold line per sentence pair"
        )


def load_sts_year(
    root: str | os.PathLike[str], year: str, subtasks: Sequence[str]
) -> dict[str, SentencePairs]:
    """Load ``STS/<year>-en-test/STS.{input,gs}.<subtask>.txt`` for each subtask."""
    folder = check_root(root) / "STS" / f"{year}-en-test"
    loaded: dict[str, SentencePairs] = {}
    for subtask in subtasks:
        name = f"{year}/{subtask}"
        input_path = folder / f"STS.input.{subtask}.txt"
        gold_path = folder / f"STS.gs.{subtask}.txt"
        inputs = _read_lines(input_path, f"STS subtask {name}")
        golds = _read_lines(gold_path, f"STS subtask {name}", keep_empty_tail=True)
        _reconcile(inputs, golds, input_path, gold_path)
        s1: list[str] = []
        s2: list[str] = []
        gold: list[float] = []
        for number, (pair, raw) in enumerate(zip(inputs, golds, strict=True), start=1):
            fields = pair.split("\t")
            if len(fields) != 2:
                raise StoreError(
                    f"{describe(input_path, line=number)}: expected two tab-separated "
                    f"sentences, got {len(fields)} field(s)"
                )
            if raw.strip() == "":  # unscored pair: SentEval drops it
                continue
            gold.append(_score(raw.strip(), gold_path, number, _STS_RANGE))
            s1.append(fields[0].strip())
            s2.append(fields[1].strip())
        loaded[subtask] = _pairs(name, s1, s2, gold, gold_path)
        _log.debug("%s: %d pairs (%d unscored dropped)", name, len(gold), len(inputs) - len(gold))
    return loaded


def _load_table(
    path: Path,
    name: str,
    *,
    header: bool,
    columns: tuple[int, int, int],
    bounds: tuple[float, float],
) -> SentencePairs:
    """One split of STS-B or SICK: ``columns`` = (sentence 1, sentence 2, score) fields."""
    lines = _read_lines(path, f"task {name.split('/')[0]}")
    first = 1
    if header:
        fields = lines[0].split("\t") if lines else []
        looks_like_data = len(fields) > columns[2] and _is_float(fields[columns[2]])
        if not fields or looks_like_data:
            raise StoreError(
                f"{describe(path, line=1)}: expected a header line "
                "(pair_ID, sentence_A, sentence_B, relatedness_score, ...)"
            )
        first = 2
    need = max(columns) + 1
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    for number, line in enumerate(lines[first - 1 :], start=first):
        fields = line.split("\t")
        if len(fields) < need:  # extra trailing fields (some STS-B lines) are ignored
            raise StoreError(
                f"{describe(path, line=number)}: expected at least {need} tab-separated "
                f"fields, got {len(fields)}"
            )
        gold.append(_score(fields[columns[2]].strip(), path, number, bounds))
        s1.append(fields[columns[0]].strip())
        s2.append(fields[columns[1]].strip())
    _log.debug("%s: %d pairs from %s", name, len(gold), path)
    return _pairs(name, s1, s2, gold, path)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _supervised(
    task: str,
    paths: tuple[Path, Path, Path],
    *,
    header: bool,
    columns: tuple[int, int, int],
    bounds: tuple[float, float],
) -> SupervisedTask:
    """Load the train, dev and test ``paths`` of a supervised task."""
    train, dev, test = (
        _load_table(path, f"{task}/{split}", header=header, columns=columns, bounds=bounds)
        for split, path in zip(("train", "dev", "test"), paths, strict=True)
    )
    return SupervisedTask(task, train, dev, test, score_range=bounds)


def load_stsb(root: str | os.PathLike[str]) -> SupervisedTask:
    """Load ``STS/STSBenchmark/sts-{train,dev,test}.csv`` (5,749 / 1,500 / 1,379 pairs)."""
    folder = check_root(root) / "STS" / "STSBenchmark"
    paths = (folder / "sts-train.csv", folder / "sts-dev.csv", folder / "sts-test.csv")
    return _supervised("STS-B", paths, header=False, columns=(5, 6, 4), bounds=_STS_RANGE)


def load_sickr(root: str | os.PathLike[str]) -> SupervisedTask:
    """Load ``SICK/SICK_{train,trial,test_annotated}.txt`` (4,500 / 500 / 4,927 pairs)."""
    folder = check_root(root) / "SICK"
    names = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")  # trial = dev
    paths = (folder / names[0], folder / names[1], folder / names[2])
    return _supervised("SICK-R", paths, header=True, columns=(1, 2, 3), bounds=_SICK_RANGE)


def load_senteval(root: str | os.PathLike[str]) -> SemanticBenchmark:
    """Load every task the directory's suite lists (see ``load_suite``)."""
    path = check_root(root)
    suite = load_suite(path)
    sts = {year: load_sts_year(path, year, subtasks) for year, subtasks in suite.sts.items()}
    loaders = {"STS-B": load_stsb, "SICK-R": load_sickr}
    supervised = {name: loaders[name](path) for name in suite.supervised}
    _log.info(
        "loaded semantic suite %r from %s: %d STS subtasks, supervised %s",
        suite.name,
        path,
        sum(len(s) for s in sts.values()),
        list(supervised),
    )
    return SemanticBenchmark(path, suite, sts, supervised)
