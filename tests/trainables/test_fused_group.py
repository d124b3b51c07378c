"""The members of a fused search trial (``trainables.seeds.MemberGroup``): configurations
of one shape trained as one fused model, each reporting what it reports trained alone
(float64 on the CPU, within ``FUSED_TRAINING``); a member whose epochs are done, or that
``stop`` takes out, leaves the group while the others train on; a checkpoint keeps who
was stopped and resumes the rest as if nothing had happened."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Generator
from pathlib import Path
from typing import cast

import pytest

from tests.trainables.test_fused_seeds import assert_same_reports
from trainables.config import ConfigError, TrainConfig
from trainables.data import TrainingData
from trainables.loop import Trainer
from trainables.seeds import GROUP_FILE, MemberGroup, member_folder, state_file
from trainables.tune import member_key, member_metrics

SMALL = dict(
    hidden_size=8,
    batch_size=8,
    epochs=3,
    snapshot_interval=1,
    ensemble_size=2,
    device="cpu",
    semantic_every=0,
    threads=1,
)
# two configurations of one shape: their own margin, learning rate, seed and epochs
CONFIGS = [
    TrainConfig(**SMALL | {"epochs": 2}, margin=0.2, lr_max=3e-3, seed=5),  # type: ignore[arg-type]
    TrainConfig(**SMALL, margin=0.35, lr_max=2e-3, seed=9),  # type: ignore[arg-type]
]


pytestmark = pytest.mark.usefixtures("float64")  # tests/trainables/conftest.py


@pytest.fixture(scope="module")
def data(float64_data: TrainingData) -> TrainingData:
    return float64_data


def _by_member(group: MemberGroup) -> dict[int, list[dict[str, float]]]:
    out: dict[int, list[dict[str, float]]] = {}
    for reports in group.run():
        for member, report in reports.items():
            out.setdefault(member, []).append(report)
    return out


@pytest.mark.slow
def test_members_report_what_they_report_alone_and_leave_at_their_own_end(
    data: TrainingData,
) -> None:
    group = MemberGroup(CONFIGS, data, None, fused=True)
    assert group.fused
    reports = _by_member(group)
    for member, config in enumerate(CONFIGS):
        alone = list(Trainer(config, data, None).run())
        assert_same_reports(reports[member], alone)
    assert [len(reports[0]), len(reports[1])] == [3, 4]  # epochs 0..2 and 0..3
    assert group.running == set() and group.stopped == set()


@pytest.mark.slow
def test_a_stopped_member_leaves_and_the_others_train_on(
    data: TrainingData, tmp_path: Path
) -> None:
    both = [dataclasses.replace(c, epochs=3) for c in CONFIGS]
    group = MemberGroup(both, data, None, fused=True)
    run = cast(Generator[dict[int, dict[str, float]], None, None], group.run())
    seen = [next(run), next(run)]  # epochs 0 and 1 of both
    group.stop(0)  # as the trainable does when the driver's searcher says so
    seen += list(run)
    assert [sorted(r) for r in seen] == [[0, 1], [0, 1], [1], [1]]
    assert group.stopped == {0} and len(group.trainers[0].history) == 2
    assert group._fused is not None and group._fused.fused.member_ids == []
    alone = list(Trainer(both[1], data, None).run())
    assert_same_reports([r[1] for r in seen], alone)
    # its checkpoint keeps who was stopped: a resumed group trains only the others
    group.save(tmp_path)
    assert json.loads((tmp_path / GROUP_FILE).read_text()) == {"stopped": [0]}
    assert (member_folder(tmp_path, 0) / state_file(0)).is_file()
    again = MemberGroup(both, data, None, fused=True)
    again.load(tmp_path)
    assert again.stopped == {0} and list(again.run()) == []  # member 1 had finished
    assert again.running == set()


@pytest.mark.slow
def test_a_group_resumes_from_its_checkpoint(data: TrainingData, tmp_path: Path) -> None:
    both = [dataclasses.replace(c, epochs=3) for c in CONFIGS]
    whole = list(MemberGroup(both, data, None, fused=True).run())
    first = MemberGroup(both, data, None, fused=True)
    run = cast(Generator[dict[int, dict[str, float]], None, None], first.run())
    head = [next(run), next(run)]
    first.stop(0)
    first.save(tmp_path)
    run.close()
    resumed = MemberGroup(both, data, None, fused=True)
    resumed.load(tmp_path)
    assert resumed.running == {1}
    rest = list(resumed.run())
    assert [sorted(r) for r in rest] == [[1], [1]]
    assert_same_reports([r[1] for r in head + rest], [r[1] for r in whole])


def test_members_of_other_shapes_are_refused_when_fusing_is_required(
    data: TrainingData,
) -> None:
    other = dataclasses.replace(CONFIGS[1], hidden_size=16)
    with pytest.raises(ConfigError, match="hidden_size"):
        MemberGroup([CONFIGS[0], other], data, None, fused=True)


def test_a_fused_result_splits_into_its_members() -> None:
    result = {member_key(0, "dev/r10_mean"): 1.0, member_key(3, "epoch"): 2, "epoch": 2, "x/y": 1}
    assert member_metrics(result) == {0: {"dev/r10_mean": 1.0}, 3: {"epoch": 2}}
