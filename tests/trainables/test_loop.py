"""The training loop without Ray: it learns, resumes exactly, and fails loudly."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench._in_place_battery import in_place
from storage import StoreError
from tests.corrupt import corrupt_copy
from trainables import names
from trainables.checkpoint import load_training_state
from trainables.config import TrainConfig
from trainables.data import TrainingData, default_senteval
from trainables.loop import NonFiniteLossError, Trainer
from trainables.relatedness import RelatednessProtocol
from trainables.semantic import make_semantic
from trainables.train import main

SMALL = dict(
    hidden_size=8,
    batch_size=8,
    epochs=3,
    snapshot_interval=1,
    ensemble_size=2,
    lr_max=3e-3,
    device="cpu",
    semantic_every=0,
    threads=1,  # OpenMP threads spin when the 2 cores are shared: 1 keeps tests fast anyway
)


@pytest.fixture(scope="module")
def data(tiny_world: Path) -> TrainingData:
    return TrainingData.from_store(str(tiny_world))


@pytest.fixture(scope="module")
def plain(data: TrainingData) -> list[dict[str, float]]:
    """The reports of one run of SMALL (no semantic battery), shared by the tests that
    read a run of it that never stopped."""
    return list(Trainer(TrainConfig(**SMALL), data).run())


def test_run_reports_epoch_zero_every_epoch_and_the_ensemble(
    plain: list[dict[str, float]],
) -> None:
    reports = plain
    assert [r["epoch"] for r in reports] == [0.0, 1.0, 2.0, 3.0]
    assert names.LOSS not in reports[0] and names.LOSS in reports[1]
    for report in reports:
        for split in (names.DEV, names.TEST):  # dev to select on, test for the curves
            assert set(names.key(split, k) for k in names.RETRIEVAL) <= set(report)
        assert report[names.BEST_RETRIEVAL] == max(
            r[names.PRIMARY_RETRIEVAL] for r in reports[: int(report["epoch"]) + 1]
        )
    assert not any(names.is_finished(r) for r in reports[:-1])
    assert not any(k.startswith("ensemble/") for r in reports[:-1] for k in r)
    final = reports[-1]
    assert set(names.key(names.ENSEMBLE, k) for k in names.RETRIEVAL) <= set(final)
    assert final["ensemble/size"] == 2.0
    best = sorted(reports[1:], key=lambda r: -r[names.PRIMARY_RETRIEVAL])[:2]
    assert {final["ensemble/epoch_1"], final["ensemble/epoch_2"]} == {r["epoch"] for r in best}


def _with_shuffled_test_data(data: TrainingData, seed: int) -> TrainingData:
    """``data`` whose test split pairs every caption with a random image's features."""
    test = data.test
    order = np.random.default_rng(seed).permutation(test.num_images)
    shuffled = dataclasses.replace(test, features=np.ascontiguousarray(test.features[order]))
    return dataclasses.replace(data, test=shuffled)


EVERY_2 = {**SMALL, "semantic_every": 2, "epochs": 3}


def _every_epoch(config: TrainConfig) -> range:
    """Every epoch of a run of ``config``: as ``complete_at``, every report waits for
    its own battery."""
    return range(config.epochs + 1)


def _every_2(tiny_world: Path, data: TrainingData, own_reports: bool) -> Trainer:
    """A Trainer of EVERY_2 whose test battery runs one round of the relatedness
    classifier (``max_epoch=0``: the rule is the same, the battery quick); each battery
    in its own epoch's report where ``own_reports``, else as the Trainer delivers it by
    default."""
    config = TrainConfig(**EVERY_2)
    semantic = make_semantic(default_senteval(str(tiny_world)), config.evaluation, config.run)
    semantic.test.protocol = RelatednessProtocol(max_epoch=0)
    complete_at = _every_epoch(config) if own_reports else ()
    return Trainer(config, data, semantic, complete_at=complete_at)


@pytest.fixture(scope="module")
def every_2(
    tiny_world: Path, data: TrainingData
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """(reports, history) of one run of ``_every_2`` with each battery in its own epoch's
    report, shared by the tests that read such a run as it is."""
    trainer = _every_2(tiny_world, data, own_reports=True)
    reports = list(trainer.run())
    return reports, trainer.history


def test_selection_reads_dev_data_only(
    tiny_world: Path,
    data: TrainingData,
    every_2: tuple[list[dict[str, float]], list[dict[str, float]]],
) -> None:
    """Shuffle every test gold score and the test split's image-caption pairing: every
    dev metric, the best-so-far objectives and the ensemble's snapshots stay exactly the
    same; only test and ensemble values move."""
    from storage.senteval import load_senteval
    from tests.trainables.test_semantic import shuffled_test_golds

    bench = load_senteval(default_senteval(str(tiny_world)))
    config = TrainConfig(**EVERY_2)
    shuffled_golds = shuffled_test_golds(bench, seed=1)
    semantic = make_semantic(shuffled_golds, config.evaluation, config.run)
    semantic.test.protocol = RelatednessProtocol(max_epoch=0)  # as in the honest run
    shuffled_data = _with_shuffled_test_data(data, seed=1)
    complete_at = _every_epoch(config)  # as in the honest run
    honest = every_2[0]
    shuffled = list(Trainer(config, shuffled_data, semantic, complete_at=complete_at).run())
    for a, b in zip(honest, shuffled, strict=True):
        selection = {
            k: v for k, v in a.items() if k.startswith("dev/") or k.startswith("ensemble/epoch")
        }
        assert selection == {k: b[k] for k in selection}
        assert names.PRIMARY_SEMANTIC in a and names.BEST_SEMANTIC in a
    assert honest[-1]["ensemble/epoch_1"] == shuffled[-1]["ensemble/epoch_1"]
    moved = [
        k
        for k in honest[-1]
        if k.startswith(("test/", "ensemble/")) and honest[-1][k] != shuffled[-1][k]
    ]
    assert names.key(names.TEST, "r10_mean") in moved and names.FINISHED in moved
    assert names.key(names.ENSEMBLE, "sts12_16_pearson") in moved


@pytest.mark.parametrize("own_reports", [True, False])
def test_the_test_battery_runs_every_semantic_every_epochs(
    tiny_world: Path,
    data: TrainingData,
    own_reports: bool,
    every_2: tuple[list[dict[str, float]], list[dict[str, float]]],
) -> None:
    """With each battery in its own epoch's report, the module's shared run of EVERY_2;
    as the Trainer delivers them by default, a run of its own."""
    if own_reports:
        reports, history = every_2
    else:
        trainer = _every_2(tiny_world, data, own_reports=False)
        reports, history = list(trainer.run()), trainer.history
    battery = names.key(names.TEST, "sts12_16_pearson")
    if not own_reports:  # epoch e's battery comes with the report of epoch e + 1
        assert [battery in r for r in reports] == [False, False, False, False]
        assert [r.get(names.LATE_EPOCH) for r in reports] == [None, 0.0, None, 2.0]
        assert [names.late(battery) in r for r in reports] == [False, True, False, True]
    else:
        assert [battery in r for r in reports] == [True, False, True, False]
        assert not any(k.startswith("late/") for r in reports for k in r)
    assert [battery in h for h in history] == [True, False, True, False]
    assert all(names.PRIMARY_SEMANTIC in r for r in reports)  # the dev score: every epoch
    assert names.key(names.ENSEMBLE, "semantic") in reports[-1]
    assert set(names.key(names.DEV, k) for k in names.DEV_SEMANTIC) <= set(reports[1])


# -- the test battery in the background (trainables._battery's module docstring) -------


def _semantic(tiny_world: Path, config: TrainConfig):
    semantic = make_semantic(default_senteval(str(tiny_world)), config.evaluation, config.run)
    assert semantic is not None
    semantic.test.protocol = RelatednessProtocol(max_epoch=50, epochs_per_round=5)
    return semantic


def _recorded(reports: list[dict[str, float]]) -> dict[int, dict[str, float]]:
    """What a tracker records per epoch (MLflow step) from ``reports``: each report's own
    metrics at its epoch, and the earlier epoch's it carries (``names.late_metrics``)
    at that epoch; speeds left out (they differ from run to run)."""
    steps: dict[int, dict[str, float]] = {}
    for report in reports:
        own = {k: v for k, v in report.items() if not k.startswith(f"{names.LATE}/")}
        steps.setdefault(int(report["epoch"]), {}).update(own)
        late = names.late_metrics(report)
        if late is not None:
            epoch, values = late
            assert not set(values) & set(steps[epoch]), "a metric recorded twice"
            steps[epoch].update(values)
    return {e: _steady(m) for e, m in steps.items()}


def _steady(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` but those that measure speed (``time/``, captions per second)."""
    return {
        k: v for k, v in metrics.items() if not k.startswith("time/") and k != names.CAPTIONS_PER_S
    }


def _without_time(history: list[dict[str, float]]) -> list[dict[str, float]]:
    return [_steady(h) for h in history]


EVERY_1 = {**SMALL, "semantic_every": 1, "epochs": 3}


@pytest.fixture(scope="module")
def straight(
    tiny_world: Path, data: TrainingData
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """(reports, history) of a run of EVERY_1 with its battery in the background that
    never stopped: what the stopped, resumed and in-place runs are held to."""
    config = TrainConfig(**EVERY_1)
    trainer = Trainer(config, data, _semantic(tiny_world, config))
    reports = list(trainer.run())
    return reports, trainer.history


def test_the_background_battery_records_what_the_battery_in_place_does(
    tiny_world: Path,
    data: TrainingData,
    straight: tuple[list[dict[str, float]], list[dict[str, float]]],
) -> None:
    """Every epoch (MLflow step) ends up with the same metrics, the same values, in the
    reports as a tracker files them and in the history, whether the battery is computed
    in place, in the training thread and in its own epoch's report (the reference,
    ``bench/_in_place_battery.py``), or in the background (the module's ``straight``
    run); the last report holds its own battery and the ensemble's."""
    config = TrainConfig(**EVERY_1)
    trainer = in_place(Trainer(config, data, _semantic(tiny_world, config)))
    sync_reports = list(trainer.run())
    sync_history = trainer.history
    bg_reports, bg_history = straight
    assert _recorded(bg_reports) == _recorded(sync_reports)
    assert _without_time(bg_history) == _without_time(sync_history)
    assert _recorded(sync_reports) == dict(enumerate(_without_time(sync_history)))
    assert not any(k.startswith(f"{names.LATE}/") for r in sync_reports for k in r)
    battery = names.key(names.TEST, "semantic")
    final = bg_reports[-1]
    assert battery in final and names.key(names.ENSEMBLE, "semantic") in final  # waited for
    assert final[names.LATE_EPOCH] == 2.0 and names.late(battery) in final
    assert [battery in r for r in bg_reports] == [False, False, False, True]


def test_epochs_where_a_scheduler_may_stop_the_trial_wait_for_their_battery(
    tiny_world: Path, data: TrainingData
) -> None:
    config = TrainConfig(**{**SMALL, "semantic_every": 1, "epochs": 4})
    trainer = Trainer(config, data, _semantic(tiny_world, config), complete_at={1, 2})
    reports = list(trainer.run())
    battery = names.key(names.TEST, "semantic")
    assert [battery in r for r in reports] == [False, True, True, False, True]
    assert [r.get(names.LATE_EPOCH) for r in reports] == [None, 0.0, None, None, 3.0]
    assert all(battery in h for h in trainer.history)


def _stop_in_epoch(trainer: Trainer, epoch: int, wait_for_battery: bool) -> None:
    """Make ``trainer`` raise KeyboardInterrupt (a Ctrl+C) while it trains ``epoch``,
    once the battery running beside it has finished (or at once)."""
    train = trainer.train_batches

    def train_batches(plan):
        if trainer.epoch == epoch - 1:
            if wait_for_battery:
                while not trainer.battery.worker.finished:
                    time.sleep(0.01)
            raise KeyboardInterrupt
        return train(plan)

    trainer.train_batches = train_batches


def test_a_stopped_run_keeps_the_batteries_that_finished(
    tiny_world: Path,
    data: TrainingData,
    straight: tuple[list[dict[str, float]], list[dict[str, float]]],
) -> None:
    """Ctrl+C while epoch 2 trains, after epoch 1's battery finished: that battery is
    in the history (and the checkpoint written then), as in a run that went on."""
    config = TrainConfig(**EVERY_1)
    expected = _without_time(straight[1])
    trainer = Trainer(config, data, _semantic(tiny_world, config))
    _stop_in_epoch(trainer, 2, wait_for_battery=True)
    reports = []
    with pytest.raises(KeyboardInterrupt):
        for report in trainer.run():
            reports.append(report)
    assert [r["epoch"] for r in reports] == [0.0, 1.0]
    assert _without_time(trainer.history) == expected[:2]  # epoch 1's battery kept
    saved = load_training_state(trainer.save_checkpoint())
    assert _without_time(saved["history"]) == expected[:2]


def test_a_run_stopped_while_its_battery_runs_goes_on_with_it(
    tiny_world: Path,
    data: TrainingData,
    straight: tuple[list[dict[str, float]], list[dict[str, float]]],
) -> None:
    """Ctrl+C at the start of epoch 2, epoch 1's battery perhaps still running: the same
    Trainer run again collects that battery first and ends as a run that never stopped."""
    config = TrainConfig(**EVERY_1)
    straight_reports, straight_history = straight
    trainer = Trainer(config, data, _semantic(tiny_world, config))
    train = trainer.train_batches
    _stop_in_epoch(trainer, 2, wait_for_battery=False)
    reports = []
    with pytest.raises(KeyboardInterrupt):
        for report in trainer.run():
            reports.append(report)
    trainer.train_batches = train  # (nothing of epoch 2 was trained)
    reports += list(trainer.run())
    assert [r["epoch"] for r in reports] == [0.0, 1.0, 2.0, 3.0]
    assert _recorded(reports) == _recorded(straight_reports)
    assert _without_time(trainer.history) == _without_time(straight_history)


def _checkpoint_at_epoch_1(tiny_world: Path, data: TrainingData, config: TrainConfig) -> bytes:
    """A checkpoint written right after epoch 1's report, while its battery still runs."""
    first = Trainer(config, data, _semantic(tiny_world, config))
    for report in first.run():
        if report["epoch"] == 1.0:
            return first.save_checkpoint()  # epoch 1's battery is still running
    raise AssertionError("no epoch 1")


def test_a_battery_lost_with_its_run_is_computed_again_on_resume(
    tiny_world: Path,
    data: TrainingData,
    straight: tuple[list[dict[str, float]], list[dict[str, float]]],
) -> None:
    """A checkpoint written while epoch 1's battery ran (as after every report) lacks
    it; the run resumed from it computes it from the checkpoint's weights and delivers
    it with the next report (whether or not that report waits for its own): the same
    record as a run that never stopped."""
    config = TrainConfig(**EVERY_1)
    straight_reports, straight_history = straight
    checkpoint = _checkpoint_at_epoch_1(tiny_world, data, config)
    state = load_training_state(checkpoint)
    assert names.key(names.TEST, "semantic") not in state["history"][1]
    for complete_at in ((), _every_epoch(config)):  # either way the lost battery comes back
        resumed = Trainer(config, data, _semantic(tiny_world, config), complete_at=complete_at)
        resumed.load_checkpoint(checkpoint)
        later = list(resumed.run())
        assert later[0]["epoch"] == 2.0 and later[0][names.LATE_EPOCH] == 1.0
        assert _recorded(straight_reports[:2] + later) == _recorded(straight_reports)
        assert _without_time(resumed.history) == _without_time(straight_history)


def test_a_run_resumed_to_end_at_its_stopped_epoch_computes_its_lost_battery_there(
    tiny_world: Path, data: TrainingData
) -> None:
    """A checkpoint written while epoch 1's battery ran, resumed with ``epochs`` 1 (to
    end where it stopped): its one report is epoch 1 again, with that battery, waited
    for, and the ensemble's, the same numbers as a run of one epoch that never stopped."""
    config = TrainConfig(**EVERY_1)
    checkpoint = _checkpoint_at_epoch_1(tiny_world, data, config)
    assert names.key(names.TEST, "semantic") not in load_training_state(checkpoint)["history"][1]
    short = config.replace(epochs=1)
    resumed = Trainer(short, data, _semantic(tiny_world, short))
    resumed.load_checkpoint(checkpoint)
    [final] = list(resumed.run())
    assert final["epoch"] == 1.0 and names.is_finished(final)
    whole = Trainer(short, data, _semantic(tiny_world, short))
    list(whole.run())
    assert _steady(final) == _steady(whole.history[-1])  # its own battery and the ensemble's
    assert _without_time(resumed.history) == _without_time(whole.history)


def _counted(trainer: Trainer) -> dict[str, int]:
    """Count ``trainer``'s embedding calls: test-split and sentence embeddings."""
    counts = {"splits": 0, "sentences": 0}
    evaluation = trainer.evaluation
    embed_split, embed_fn = evaluation.embed_split, evaluation.embed_fn

    def split(*args, **kwargs):
        counts["splits"] += 1
        return embed_split(*args, **kwargs)

    def sentences(*args, **kwargs):
        counts["sentences"] += 1
        return embed_fn(*args, **kwargs)

    evaluation.embed_split, evaluation.embed_fn = split, sentences
    return counts


@pytest.mark.parametrize(("own_reports", "every"), [(True, 1), (False, 2)])
def test_the_ensemble_reuses_its_snapshots_embeddings_with_the_same_numbers(
    tiny_world: Path, data: TrainingData, own_reports: bool, every: int
) -> None:
    """The ensemble sums the test-split and battery embeddings its snapshots got at their
    own epochs: it reports exactly what embedding them again gives (a trainer restored
    from the run's checkpoint, whose snapshots hold their weights only), with no
    embedding of its own but for a snapshot whose epoch ran no battery (with ``every``
    2: epochs 1 and 3), which is embedded for it; each battery in its own epoch's report
    (``own_reports``) or delivered late."""
    config = TrainConfig(**{**SMALL, "semantic_every": every, "epochs": 4})
    complete_at = _every_epoch(config) if own_reports else ()
    trainer = Trainer(config, data, _semantic(tiny_world, config), complete_at=complete_at)
    counts = _counted(trainer)
    final = list(trainer.run())[-1]
    ensemble = {k: v for k, v in final.items() if k.startswith(f"{names.ENSEMBLE}/")}
    assert names.key(names.ENSEMBLE, "semantic") in ensemble
    again = Trainer(config, data, _semantic(tiny_world, config))
    again.load_checkpoint(trainer.save_checkpoint())
    again_counts = _counted(again)
    assert again.ensemble_metrics() == ensemble
    assert again_counts == {"splits": 1, "sentences": 2}  # the split once, each member's battery
    batteries = len(range(0, 5, every))
    members = {final["ensemble/epoch_1"], final["ensemble/epoch_2"]}
    without_battery = sum(1 for epoch in members if epoch % every)
    # 5 evaluations: dev and test retrieval, the dev semantic score; the batteries
    assert counts == {"splits": 10, "sentences": 5 + batteries + without_battery}


def test_resume_from_a_checkpoint_gives_the_same_metrics(
    data: TrainingData, plain: list[dict[str, float]]
) -> None:
    config = TrainConfig(**SMALL)
    straight = plain
    first = Trainer(config, data)
    run = first.run()
    for _ in range(3):  # epoch 0, 1, 2
        next(run)
    saved = first.save_checkpoint()
    resumed = Trainer(config, data)
    resumed.load_checkpoint(saved)
    assert resumed.epoch == 2
    rest = list(resumed.run())
    timing = ("time/", "train/captions_per_s")
    for expected, got in zip(straight[3:], rest, strict=True):
        assert {k: v for k, v in got.items() if not k.startswith(timing)} == {
            k: v for k, v in expected.items() if not k.startswith(timing)
        }


def test_checkpoint_loads_with_weights_only(data: TrainingData, tmp_path: Path) -> None:
    trainer = Trainer(TrainConfig(**SMALL), data)
    next(trainer.run())
    path = tmp_path / "state.pt"
    path.write_bytes(trainer.save_checkpoint())
    state = torch.load(path, weights_only=True)
    assert state["config"]["hidden_size"] == 8 and state["epoch"] == 0


def test_resume_with_another_config_is_refused(data: TrainingData) -> None:
    saved = Trainer(TrainConfig(**SMALL), data).save_checkpoint()
    other = Trainer(TrainConfig(**{**SMALL, "margin": 0.3}), data)
    with pytest.raises(ValueError, match="different config"):
        other.load_checkpoint(saved)


def test_a_diverging_loss_names_epoch_and_step(data: TrainingData) -> None:
    trainer = Trainer(TrainConfig(**SMALL), data)
    with torch.no_grad():
        trainer.model.image_encoder.linear.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at epoch 1, step 1 of 60"):
        trainer.train_one_epoch()


def test_learns_on_the_embedded_world(data: TrainingData) -> None:
    # The tiny world has 12 dev images, so R@10 is near chance-saturated; R@1 and the
    # loss show the learning.
    config = TrainConfig(**{**SMALL, "hidden_size": 32, "epochs": 4})
    reports = list(Trainer(config, data).run())
    r1 = names.key(names.DEV, "c2i_r1")
    assert reports[4][r1] > 2 * reports[0][r1]
    assert reports[4][names.LOSS] < reports[1][names.LOSS] / 5


@pytest.mark.slow
def test_cli_prints_json_per_epoch_with_semantic_metrics(
    tiny_world: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = [
        "--data",
        str(tiny_world),
        "--json",
        "--hidden-size",
        "8",
        "--batch-size",
        "8",
        "--epochs",
        "2",
        "--device",
        "cpu",
        "--checkpoint",
        str(tmp_path / "c.pt"),
    ]
    assert main(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1, 2]
    assert all(names.PRIMARY_SEMANTIC in line for line in lines)
    assert lines[2][names.BEST_SEMANTIC] == max(line[names.PRIMARY_SEMANTIC] for line in lines)
    assert names.key(names.ENSEMBLE, "semantic") in lines[-1]
    assert (tmp_path / "c.pt").exists()
    # Resuming a finished run has nothing left to train: it says so on stderr only.
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"nothing to train: the checkpoint {tmp_path / 'c.pt'}")


def test_cli_rejects_bad_values_by_name(
    tiny_world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data", str(tiny_world), "--rnn-type", "rnn"]) == 2
    assert capsys.readouterr().err == "error: --rnn-type: got 'rnn', expected one of gru, lstm\n"
    assert main(["--data", str(tiny_world / "nope")]) == 2
    assert "not a feature store" in capsys.readouterr().err


@pytest.mark.parametrize("shard", ["images/train-00000.parquet", "captions/test-00000.parquet"])
@pytest.mark.parametrize("position", [0.1, 0.5, 0.99])
def test_a_corrupt_shard_stops_training_naming_it(
    tiny_world: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    shard: str,
    position: float,
) -> None:
    store = corrupt_copy(tiny_world, tmp_path / "store", shard, position)
    checkpoint = tmp_path / "c.pt"
    args = ["--data", str(store), "--hidden-size", "8", "--batch-size", "8", "--epochs", "1"]
    assert main([*args, "--checkpoint", str(checkpoint)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    assert f"{shard}: checksum mismatch" in err[0]
    assert not checkpoint.exists()  # nothing trained
    with pytest.raises(StoreError, match=f"{shard}: checksum mismatch"):
        TrainingData.from_store(str(store))


def test_no_verify_reads_a_corrupt_store(tiny_world: Path, tmp_path: Path) -> None:
    store = corrupt_copy(tiny_world, tmp_path / "store")
    data = TrainingData.from_store(str(store), verify=False)
    assert data.train.num_images == TrainingData.from_store(str(tiny_world)).train.num_images


def test_store_brings_its_semantic_sets(tiny_world: Path) -> None:
    senteval = default_senteval(str(tiny_world))
    assert senteval is not None and Path(senteval, "suite.json").exists()
    off = TrainConfig(semantic_every=0)
    assert make_semantic(senteval, off.evaluation, off.run) is None


def test_bf16_autocast_stays_close_to_fp32(data: TrainingData) -> None:
    reports = {}
    for precision in ("fp32", "bf16"):
        trainer = Trainer(TrainConfig(**{**SMALL, "epochs": 1, "precision": precision}), data)
        reports[precision] = list(trainer.run())
    fp32, bf16 = reports["fp32"][1], reports["bf16"][1]
    assert names.is_finished(bf16)
    assert bf16[names.LOSS] == pytest.approx(fp32[names.LOSS], rel=0.05)
    assert abs(bf16[names.PRIMARY_RETRIEVAL] - fp32[names.PRIMARY_RETRIEVAL]) < 10


def test_a_background_battery_that_fails_stops_the_run_with_its_own_error(
    tiny_world: Path, data: TrainingData
) -> None:
    """The error a battery raises in the background is raised in the training thread
    when its battery is collected (the next epoch's end), as it was, with a note."""
    config = TrainConfig(**{**SMALL, "semantic_every": 1, "epochs": 2})
    semantic = _semantic(tiny_world, config)

    class Broken(type(semantic.test)):
        def __call__(self, embed):
            raise MemoryError("no room for the battery")

    semantic.test.__class__ = Broken
    trainer = Trainer(config, data, semantic)
    run = trainer.run()
    assert next(run)["epoch"] == 0.0  # its battery is started, not yet read
    with pytest.raises(MemoryError, match="no room for the battery") as caught:
        next(run)
    assert "in the test battery of epoch 0, computed in the background" in caught.value.__notes__


def test_seeds_combine_a_late_battery_as_their_own() -> None:
    """A trial at several seeds (trainables.group): the battery each seed delivers late
    is averaged, and its spread reported, as when it came in its own epoch's report."""
    from trainables.group import combine

    test_semantic = names.key(names.TEST, "semantic")
    reports = [
        {"epoch": 3.0, names.LATE_EPOCH: 2.0, names.late(test_semantic): value}
        for value in (0.5, 0.7)
    ]
    combined = combine(reports)
    assert combined[names.LATE_EPOCH] == 2.0
    assert combined[names.late(test_semantic)] == pytest.approx(0.6)
    spread = names.late(names.spread(test_semantic))
    assert combined[spread] == pytest.approx(
        combine([{"epoch": 2.0, test_semantic: 0.5}, {"epoch": 2.0, test_semantic: 0.7}])[
            names.spread(test_semantic)
        ]
    )
    assert names.late_metrics(combined) == (
        2,
        {test_semantic: pytest.approx(0.6), names.spread(test_semantic): combined[spread]},
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_background_battery_on_a_gpu_records_what_the_battery_in_place_does(
    tiny_world: Path, data: TrainingData
) -> None:
    """On a GPU the worker embeds and scores on its own CUDA stream (its regressions
    as CUDA graphs captured there) while the next epoch trains: every epoch records the
    same metrics as in place (``bench/_in_place_battery.py``); the battery's
    correlations agree up to the GPU's own run-to-run rounding of training (the two runs
    train separately)."""
    config = TrainConfig(**{**SMALL, "device": "cuda", "semantic_every": 1, "epochs": 3})
    recorded = {}
    for background in (False, True):
        trainer = Trainer(config, data, _semantic(tiny_world, config))
        if not background:
            in_place(trainer)
        recorded[background] = _recorded(list(trainer.run()))
        assert all(names.key(names.TEST, "semantic") in h for h in trainer.history)
    assert {e: set(m) for e, m in recorded[True].items()} == {
        e: set(m) for e, m in recorded[False].items()
    }
    for epoch, metrics in recorded[True].items():  # the battery's correlations
        for key, value in metrics.items():
            if key.startswith(f"{names.TEST}/") and key.endswith(("pearson", "spearman")):
                expected = recorded[False][epoch][key]
                assert value == pytest.approx(expected, abs=0.05), (epoch, key)


def test_the_ensembles_semantic_scores_are_its_saved_models_by_default(
    tiny_world: Path, data: TrainingData
) -> None:
    """What a run reports as its ensemble's semantic battery (``ensemble/*``: what MLflow
    shows) is what the saved ensemble gives through ``SentenceEncoder.encode`` with its
    defaults, scored by the same evaluator: every score, the supervised relatedness
    protocol's (not scale-free) included."""
    from trainables.checkpoint import EnsembleWeights
    from trainables.encoder import SentenceEncoder

    config = TrainConfig(**{**SMALL, "epochs": 3, "semantic_every": 3})
    semantic = _semantic(tiny_world, config)
    trainer = Trainer(config, data, semantic)
    final = list(trainer.run())[-1]
    assert final["ensemble/size"] == 2.0  # a sum of two models' embeddings
    saved = EnsembleWeights.from_training_state(trainer.state_dict())
    encoder = SentenceEncoder(saved, device="cpu")
    again = semantic.test(encoder.encode)
    prefix = f"{names.ENSEMBLE}/"
    reported = {k.removeprefix(prefix): v for k, v in final.items() if k.startswith(prefix)}
    scores = {k: v for k, v in again.items() if k in reported}
    assert {"semantic", "sickr_pearson", "stsb_pearson"} <= set(scores), sorted(again)
    for key, value in scores.items():
        assert reported[key] == pytest.approx(value, abs=1e-5), key
