"""What a search says of the hardware it runs on before its trials start
(``gridsearch.cluster.fixed_settings``), that it starts or joins Ray, and how long its
Ray dashboard stays up."""

from __future__ import annotations

from pathlib import Path

from gridsearch.cluster import FUSE_ON_CPU, Resources, fixed_settings, ray_start_line
from gridsearch.settings import SearchSettings

CPU = Resources(cpu=1.0, gpu=0.0, concurrent=2)
GPU = Resources(cpu=4.0, gpu=1.0, concurrent=1)


def _settings(tmp_path: Path, *flags: str) -> SearchSettings:
    return SearchSettings.from_argv(
        ["--space", "margin_sweep", "--runs-dir", str(tmp_path), *flags]
    )


def test_fuse_on_cpus_says_at_the_start_that_it_does_not_pay_there(tmp_path: Path) -> None:
    _, note = fixed_settings(_settings(tmp_path, "--fuse", "4"), CPU)
    lines = note.splitlines()
    assert lines[0].startswith("no GPU: using CPU-sized model settings")
    assert lines[1] == FUSE_ON_CPU.format(fuse=4)
    assert lines[1].startswith("--fuse 4 on CPUs: it does not pay here")
    _, smoke = fixed_settings(_settings(tmp_path, "--fuse", "2", "--smoke-test"), CPU)
    assert smoke == FUSE_ON_CPU.format(fuse=2)  # a smoke test's only line
    for flags, resources in ((("--fuse", "4"), GPU), ((), CPU), (("--fuse", "1"), CPU)):
        _, other = fixed_settings(_settings(tmp_path, *flags), resources)
        assert "--fuse" not in other, (flags, other)


def test_the_dashboard_line_says_how_long_it_lives_and_how_to_keep_one(tmp_path: Path) -> None:
    from gridsearch.summary import ray_dashboard_line

    url = "http://127.0.0.1:8265"
    local = ray_dashboard_line(_settings(tmp_path), url)
    assert local.startswith(f"Ray dashboard:  {url} stopped with the search")
    assert "`ray start --head --dashboard-host 127.0.0.1`" in local and "--address auto" in local
    assert "`ray get-auth-token`" in local and "`ray stop`" in local
    joined = ray_dashboard_line(_settings(tmp_path, "--address", "10.0.0.1:6379"), url)
    assert joined == f"Ray dashboard:  {url} (the cluster's: up as long as the cluster is)"


def test_starting_or_joining_ray_is_said_before_the_wait(tmp_path: Path) -> None:
    what, key, note = ray_start_line(_settings(tmp_path))
    assert what == "starting a local Ray" and "--address" in note
    joined = ray_start_line(_settings(tmp_path, "--address", "10.0.0.1:6379"))
    assert joined[0] == "joining the Ray cluster at 10.0.0.1:6379" and joined[1] != key
