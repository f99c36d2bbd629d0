"""A scan of everything a run, ``report``, ``junit`` and ``export`` write: secrets planted in every shape
(by name, inside JSON, YAML and ``k=v`` texts, in a URL, behind curl's ``-u``, an option, an HTTP
authorization, in the process environment) appear in none of the files."""

from __future__ import annotations

import pytest

from acceptance.cli.main import main
from tests.harness import PLUGIN_ARGS

# each planted value holds a unique word the scan looks for (after "pl", so a masked prefix cannot hide it)
PLANTED = {
    "env.CFG": '{"password": "pl-json-1"}',
    "env.MYSQL_PWD": "pl-pwd-2",
    "env.GITHUB_PAT": "pl-pat-3",
    "env.MY_CREDS": "pl-creds-4",
    "env.DB_URL": "https://user:pl@url-5@db.example:5432/x",
    "env.FETCH": "curl -u user:pl-curl-6 https://h",
    "env.ARGS": "train --token pl-opt-7 --epochs 1",
    "env.HDR": "Authorization: Bearer pl-bearer-8",
    "env.EXTRA": "{HF_TOKEN: pl-nested-9, site: s}",
    "env.YAML": "password: pl-yaml-10",
    "env.KV": "DB_PASS=pl-kv-11 NCCL_DEBUG=WARN",
}
ENVIRONMENT = {"NCCL_PROXY_URL": "https://u:pl-env-12@proxy:3128", "HF_TOKEN": "pl-env-13", "MYSQL_PWD": "pl-env-14"}
WORDS = [f"{kind}-{n}" for kind, n in [
    ("json", 1), ("pwd", 2), ("pat", 3), ("creds", 4), ("curl", 6), ("opt", 7), ("bearer", 8), ("nested", 9),
    ("yaml", 10), ("kv", 11), ("env", 12), ("env", 13), ("env", 14),
]] + ["url-5"]  # fmt: skip


@pytest.mark.e2e
def test_no_planted_secret_in_any_file_written(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    folder = suite.path / "evidence"
    sets = [arg for key, value in PLANTED.items() for arg in ("--cluster-set", f"{key}={value}")]
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--cluster-profile", "local-cpu", "--cluster-evidence", str(folder),
        *sets, "tests_cluster/test_connectivity.py", "-k", "test_world_size", timeout=300,
    )  # fmt: skip
    assert (folder / "evidence.json").is_file(), result.stdout.str()[-3000:]
    outputs = suite.path / "outputs"
    assert main(["report", str(folder), "-o", str(outputs / "report.html")]) == 0
    assert main(["junit", str(folder), "-o", str(outputs / "junit.xml")]) == 0
    assert main(["export", str(folder), "-o", str(outputs / "figures.csv")]) == 0
    written = [p for p in (folder, outputs) for p in p.rglob("*") if p.is_file()]
    assert len(written) > 5
    found = [
        f"{path.relative_to(suite.path)}: {word}"
        for path in written
        for word in WORDS
        if word.encode() in path.read_bytes()
    ]
    assert not found
    assert "MYSQL_PWD" in (folder / "evidence.json").read_text()  # the names stay; their values do not
