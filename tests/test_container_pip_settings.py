"""deploy/container/pip_settings.py: the host's pip settings for an image build, and the local paths to mount."""

from __future__ import annotations

import configparser
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pip_settings", ROOT / "deploy" / "container" / "pip_settings.py")
    assert spec is not None and spec.loader is not None
    found = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(found)
    return found


def test_local_paths_are_mounted_and_an_index_brings_the_files_beside_it(tmp_path: Path) -> None:
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    cert = tmp_path / "ca.crt"
    cert.write_text("x")
    settings = {
        "cert": str(cert),
        "find-links": f"{tmp_path / 'wheels'} https://example.org/wheels",
        "extra-index-url": f"file://{tmp_path / 'pypi' / 'simple'} https://download.pytorch.org/whl/cpu",
        "constraint": str(tmp_path / "missing.txt"),
    }
    assert module().local_paths(settings) == [cert, tmp_path / "wheels", tmp_path / "pypi"]


def test_the_written_pip_conf_holds_the_settings_and_the_extra_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = module()
    monkeypatch.setattr(found, "effective_settings", lambda python: {"cert": "/etc/ssl/certs/ca.crt", "timeout": "60"})
    assert found.main([str(tmp_path), "https://download.pytorch.org/whl/cpu"]) == 0
    conf = configparser.ConfigParser(interpolation=None)
    conf.read(tmp_path / "pip.conf")
    assert dict(conf["global"]) == {
        "cert": "/etc/ssl/certs/ca.crt",
        "timeout": "60",
        "extra-index-url": "https://download.pytorch.org/whl/cpu",
    }
    assert capsys.readouterr().out.splitlines()[0] == f"{(tmp_path / 'pip.conf').resolve()}:/etc/pip.conf:ro"
