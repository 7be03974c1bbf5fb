"""The sample configuration the administrator's guide installs (contrib/siteagent.yaml): it
passes ``siteagent check-config``, shows every key, and every key it sets is the default, as
its header says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from siteagent.cli.main import main
from siteagent.config import loading
from siteagent.host import installation

SAMPLE = Path(__file__).resolve().parents[2] / "contrib" / "siteagent.yaml"

#: Keys whose default depends on the host (its name, the state directory and what is derived
#: from it, the names derived from the listen address), so the sample shows them commented
#: out; ``api.tls.self_signed`` is not a key.
HOST_DEPENDENT = {
    "api.public_names",
    "site.name",
    "state_dir",
    "api.tls.cert",
    "api.tls.key",
    "api.tls.self_signed",
    "security.authorized_clients",
    "security.site_key",
    "ledger.path",
}


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy made under the tests' umask (a checkout's mode depends on the umask of whoever
    cloned), with the default state directory in the test's own directory."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    copy = tmp_path / "siteagent.yaml"
    copy.write_text(SAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    return copy


def test_check_config_passes_on_the_sample(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", str(sample), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_every_key_the_sample_sets_is_the_default(sample: Path) -> None:
    configured = loading.load(sample)
    assert loading.flatten(configured) == loading.flatten(loading.load(None))


def test_the_sample_shows_every_key(sample: Path) -> None:
    configured = loading.load(sample)
    keys = {key for key, _ in loading.flatten(configured)}
    missing = sorted(keys - configured.explicit - HOST_DEPENDENT)
    assert not missing, f"add {', '.join(missing)} to {SAMPLE}, with its default and a comment"


def test_the_administrators_guide_installs_the_sample() -> None:
    guide = (SAMPLE.parents[1] / "docs/admin.md").read_text(encoding="utf-8")
    assert "\nsiteagent install-service " in guide
    config_file = Path("/etc/siteagent/siteagent.yaml")
    files = installation.plan(loading.load(None), config_file, Path("/usr/bin/siteagent"), Path())
    [sample] = [file for file in files if file.target == config_file]
    assert sample.content == SAMPLE.read_bytes()
