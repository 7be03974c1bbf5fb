"""The registry of backend types, and the site opening the configured one through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from siteagent.backends import registry
from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.backends.slurm import SlurmBackend, SlurmConfig
from siteagent.config import loading
from siteagent.config.schema import BackendType
from siteagent.market.site import open_backend


def test_every_configurable_type_is_registered() -> None:
    assert set(registry.BACKEND_TYPES) == {kind.value for kind in BackendType}


def test_an_unknown_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown backend type 'lsf'"):
        registry.open_backend("lsf", None, registry.Shared("sa-", tmp_path))


def test_the_shared_prefix_goes_on_the_backend(tmp_path: Path) -> None:
    shared = registry.Shared("market-", tmp_path)
    slurm = registry.open_backend("slurm", SlurmConfig(partition="batch"), shared)
    assert isinstance(slurm, SlurmBackend)
    assert (slurm.config.name_prefix, slurm.config.partition) == ("market-", "batch")
    pbs = registry.open_backend("pbs", PbsConfig(queue="workq"), shared)
    assert isinstance(pbs, PbsBackend)
    assert (pbs.config.name_prefix, pbs.config.queue) == ("market-", "workq")


def test_a_prefix_the_backend_cannot_use_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefix"):
        registry.open_backend("pbs", PbsConfig(), registry.Shared("a-very-long-pfx1", tmp_path))


@pytest.mark.parametrize(
    ("kind", "section", "expected"),
    [
        ("slurm", "slurm: {partition: batch, users: [market], timeout: 12}", SlurmBackend),
        ("pbs", "pbs: {queue: workq, timeout: 12}", PbsBackend),
    ],
)
def test_the_site_maps_its_configuration_onto_the_backend(
    tmp_path: Path, kind: str, section: str, expected: type
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"backend:\n  type: {kind}\n  {section}\nreservations: {{name_prefix: mkt-}}\n"
        f"state_dir: {tmp_path / 'state'}\n"
    )
    backend = open_backend(loading.load(path))
    assert isinstance(backend, expected)
    assert isinstance(backend, (SlurmBackend, PbsBackend))
    assert backend.config.name_prefix == "mkt-"
    assert backend.config.timeout == 12 and backend.timeout == 12
