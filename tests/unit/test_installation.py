"""``siteagent install-service``: which files a site gets for its configuration, what is written
into them, and that an administrator's own files are kept unless forced."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Dict

import pytest

from siteagent.cli.main import main
from siteagent.config import loading
from siteagent.host import installation
from siteagent.host.installation import Action, plan, set_constant, staged

REPO = Path(__file__).resolve().parents[2]
EXECUTABLE = Path("/opt/siteagent/bin/siteagent")
CONFIG_FILE = Path("/etc/siteagent/siteagent.yaml")
SLURM_DIR = Path("/etc/slurm")


def planned(settings: Dict[str, Any]) -> Dict[Path, installation.SiteFile]:
    config = loading.parse(settings)
    return {file.target: file for file in plan(config, CONFIG_FILE, EXECUTABLE, SLURM_DIR)}


COMMON = {
    Path("/etc/systemd/system/siteagent.service"),
    Path("/etc/default/siteagent"),
    CONFIG_FILE,
    installation.SHARE / "prometheus" / "siteagent-rules.yml",
    installation.SHARE / "grafana" / "siteagent-dashboard.json",
}


def test_set_constant_writes_one_assignment() -> None:
    python = 'A = "x"\nSOCKET = "/run/siteagent/notify.sock"\n'
    assert set_constant(python, "SOCKET", "/tmp/s.sock") == 'A = "x"\nSOCKET = "/tmp/s.sock"\n'
    lua = 'local PREFIX = "sa-"\nlocal TAG = PREFIX\n'
    assert set_constant(lua, "PREFIX", "hpc-") == 'local PREFIX = "hpc-"\nlocal TAG = PREFIX\n'
    with pytest.raises(ValueError, match="found 0"):
        set_constant(python, "PREFIX", "sa-")
    with pytest.raises(ValueError, match="found 2"):
        set_constant(python + python, "SOCKET", "/x")


def test_a_replayed_site_gets_the_service_and_the_monitoring_files() -> None:
    files = planned({})
    assert set(files) == COMMON
    unit = files[Path("/etc/systemd/system/siteagent.service")].content.decode()
    assert f"ExecStart={EXECUTABLE} serve --config {CONFIG_FILE}\n" in unit
    sample = (REPO / "contrib" / "siteagent.yaml").read_bytes()
    assert files[CONFIG_FILE].content == sample


def test_a_slurm_site_gets_its_programs_for_its_socket_and_prefix() -> None:
    files = planned(
        {
            "backend": {"type": "slurm"},
            "reservations": {"name_prefix": "hpc-"},
            "notifications": {"socket": "/run/agent/n.sock"},
        }
    )
    prolog = files[installation.LIBEXEC / "slurm-resv-prolog"]
    epilog = files[installation.LIBEXEC / "slurm-resv-epilog"]
    lua = files[SLURM_DIR / "job_submit.lua"]
    assert set(files) == COMMON | {prolog.target, epilog.target, lua.target}
    assert prolog.content == epilog.content and prolog.mode == 0o755
    assert 'SOCKET = "/run/agent/n.sock"\n' in prolog.content.decode()
    assert 'PREFIX = "hpc-"\n' in prolog.content.decode()
    assert 'local PREFIX = "hpc-"\n' in lua.content.decode()


def test_without_a_socket_the_programs_notify_the_units_runtime_directory() -> None:
    prolog = planned({"backend": {"type": "slurm"}})[installation.LIBEXEC / "slurm-resv-prolog"]
    assert f'SOCKET = "{installation.DEFAULT_SOCKET}"\n' in prolog.content.decode()


def test_a_pbs_site_gets_the_hook_and_its_configuration() -> None:
    files = planned({"backend": {"type": "pbs"}, "notifications": {"socket": "/run/a.sock"}})
    hook = files[installation.SHARE / "pbs" / "siteagent_hook.py"]
    settings = files[installation.SHARE / "pbs" / "siteagent_hook.json"]
    assert hook.content == (REPO / "contrib" / "pbs" / "siteagent_hook.py").read_bytes()
    assert json.loads(settings.content) == {
        "socket": "/run/a.sock",
        "prefix": "sa-",
        "agent_user": "siteagent",
        "agent_host": socket.getfqdn(),  # the agent's: install-service runs beside it
    }
    assert not any(target.parent == installation.LIBEXEC for target in files)


def test_installing_keeps_what_differs_unless_forced(tmp_path: Path) -> None:
    files = list(planned({"backend": {"type": "slurm"}}).values())
    done = installation.install(files, tmp_path, force=False)
    assert set(done.values()) == {Action.INSTALL}
    prolog = staged(installation.LIBEXEC / "slurm-resv-prolog", tmp_path)
    assert prolog.stat().st_mode & 0o777 == 0o755
    assert set(installation.install(files, tmp_path, force=False).values()) == {Action.UNCHANGED}
    config = staged(CONFIG_FILE, tmp_path)
    config.write_text("backend: {type: slurm}\n")  # the administrator's edits
    again = installation.install(files, tmp_path, force=False)
    assert again[CONFIG_FILE] is Action.KEEP
    assert config.read_text() == "backend: {type: slurm}\n"
    assert installation.install(files, tmp_path, force=True)[CONFIG_FILE] is Action.REPLACE
    assert config.read_bytes() == (REPO / "contrib" / "siteagent.yaml").read_bytes()


def install_service(tmp_path: Path, config_text: str, *options: str) -> int:
    """`siteagent install-service` for a configuration, staged under tmp_path/root."""
    config = tmp_path / "siteagent.yaml"
    config.write_text(config_text)
    destdir = tmp_path / "root"
    return main(["install-service", "--config", str(config), "--destdir", str(destdir), *options])


def test_the_command_dry_run_writes_nothing_and_says_what_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = "backend: {type: pbs}\nnotifications: {socket: /run/siteagent/n.sock}\n"
    assert install_service(tmp_path, config, "--json", "--dry-run") == 0
    answer = json.loads(capsys.readouterr().out)
    assert not (tmp_path / "root").exists()
    assert {row["action"] for row in answer["files"]} == {"install"}
    assert any(
        "import hook siteagent application/x-python" in step for step in answer["next_steps"]
    )
    assert install_service(tmp_path, config, "--json") == 0
    installed = json.loads(capsys.readouterr().out)
    assert [row["file"] for row in installed["files"]] == [row["file"] for row in answer["files"]]
    assert all(Path(row["file"]).is_file() for row in installed["files"])


def test_a_slurm_site_is_told_its_slurm_conf_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install_service(tmp_path, "backend: {type: slurm}\n", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "ResvProlog=/usr/libexec/siteagent/slurm-resv-prolog" in out
    assert "JobSubmitPlugins=lua" in out
    assert "set notifications.socket: /run/siteagent/notify.sock" in out
