"""Secrets are masked one way everywhere: the names that are credentials, the probes' records of the
environment (the collectives probe's ``nccl_env``), the command line, the evidence's holder file and the
reports, which mask again whatever an older evidence file still holds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from acceptance import masking
from acceptance.cli.main import main
from acceptance.json_types import JSONObject
from acceptance.probes.collectives import nccl_settings
from tests.harness import EVIDENCE

SECRETS = {"NCCL_IB_PKEY": "0x8001", "NCCL_IB_PASSWD_X": "pw-nccl-1", "DB_PASS": "pw-db-2", "SLURM_JWT": "jwt-3"}


@pytest.mark.parametrize(
    "name", ["DB_PASS", "MY_PASS", "SLURM_JWT", "NCCL_IB_PKEY", "NCCL_IB_PASSWD_X", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"]
)
def test_credential_names(name: str) -> None:
    assert masking.is_secret(name)


@pytest.mark.parametrize("name", ["NCCL_DEBUG", "NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME"])
def test_settings_are_not_credentials(name: str) -> None:
    assert not masking.is_secret(name)


def test_nccl_env_masks_credentials() -> None:
    env = {**SECRETS, "NCCL_DEBUG": "WARN", "HOME": "/root"}
    assert nccl_settings(env) == {"NCCL_DEBUG": "WARN", "NCCL_IB_PASSWD_X": "***", "NCCL_IB_PKEY": "***"}


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--cluster-set", "env.DB_PASS=pw-db-2"], ["--cluster-set", "env.DB_PASS=***"]),
        (["--cluster-set=env.SLURM_JWT=jwt-3"], ["--cluster-set=env.SLURM_JWT=***"]),
        (["--db-password=pw-db-2", "-q"], ["--db-password=***", "-q"]),
        (["--api-token", "jwt-3", "-q"], ["--api-token", "***", "-q"]),
        (["MY_PASS=pw-db-2", "x"], ["MY_PASS=***", "x"]),
        (["--cluster-set", "training.steps=3"], ["--cluster-set", "training.steps=3"]),
    ],
)
def test_command_line_secrets(argv: list[str], shown: list[str]) -> None:
    assert masking.masked_command(["pytest", *argv]) == ["pytest", *shown]


def leaky_evidence() -> dict[str, Any]:
    """Reference evidence as a run before the masking would have written it: secrets in every env record
    and on the command line."""
    data: dict[str, Any] = json.loads((EVIDENCE / "h200-x2" / "evidence.json").read_text())
    data = copy.deepcopy(data)
    data["command"] = ["pytest", "--cluster-set", "env.DB_PASS=pw-db-2", "--cluster-set=env.SLURM_JWT=jwt-3"]
    for probe in data.get("probes") or []:
        if isinstance(probe.get("result"), dict):
            probe["result"]["nccl_env"] = {**SECRETS, "NCCL_DEBUG": "WARN"}
    for test in data.get("tests") or []:
        if isinstance(test.get("measurements"), dict):
            test["measurements"]["nccl_env"] = {**SECRETS}
    return data


def test_masked_record_leaves_no_secret() -> None:
    shown = json.dumps(masking.masked_record(leaky_evidence()))
    assert not [value for value in SECRETS.values() if value in shown]
    assert '"NCCL_DEBUG": "WARN"' in shown and '"NCCL_IB_PKEY": "***"' in shown


def test_reports_show_no_secret(tmp_path: Path, no_plots: None) -> None:
    (tmp_path / "evidence.json").write_text(json.dumps(leaky_evidence()))
    assert main(["report", str(tmp_path)]) == 0
    for name in ("report.html", "report.md"):
        text = (tmp_path / name).read_text()
        assert "DB_PASS=***" in text, name
        assert not [value for value in SECRETS.values() if value in text], name


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://u:PASS@db:5432/x", "https://u:***@db:5432/x"),
        ("postgres://admin:s3cr%40t@db/x?sslmode=require", "postgres://admin:***@db/x?sslmode=require"),
        ("run --token=abc123 --epochs 3", "run --token=*** --epochs 3"),
        ("run --password abc123 -v", "run --password *** -v"),
        ("--api-key --verbose", "--api-key --verbose"),  # an option next is no value
        ("Authorization: Bearer eyJhbGciOi.xyz", "Authorization: Bearer ***"),
        ("https://hub/api?token=hf_abc&x=1", "https://hub/api?token=***&x=1"),
        ("DB_PASS=pw-2 NCCL_DEBUG=WARN", "DB_PASS=*** NCCL_DEBUG=WARN"),
    ],
)
def test_a_secret_is_masked_by_its_shape_inside_any_value(text: str, shown: str) -> None:
    assert masking.masked_text(text) == shown


@pytest.mark.parametrize(
    "text",
    ["https://example.com/a@b", "ssh://git@github.com/x", "NCCL_IB_HCA=mlx5_0", "tokens_per_s 1e-3", "--tier quick"],
)
def test_what_has_no_secret_s_shape_stays(text: str) -> None:
    assert masking.masked_text(text) == text


def test_an_allowed_variable_a_nested_mapping_and_the_command_line_are_masked_by_shape() -> None:
    from acceptance.evidence.environment import allowed_env

    url = "https://u:PASS@proxy:3128"
    assert allowed_env({"NCCL_PROXY_URL": url, "NCCL_DEBUG": "WARN"}) == {
        "NCCL_DEBUG": "WARN", "NCCL_PROXY_URL": "https://u:***@proxy:3128",
    }  # fmt: skip
    env = {"EXTRA": {"HF_TOKEN": "hf_1", "inner": {"api_key": "k2"}, "site": "x"}, "ARGS": "--token=t3", "D": url}
    assert masking.masked_env(env) == {
        "EXTRA": {"HF_TOKEN": "***", "inner": {"api_key": "***"}, "site": "x"},
        "ARGS": "--token=***",
        "D": "https://u:***@proxy:3128",
    }
    argv = ["pytest", "--cluster-set", "env.DATABASE_URL=https://u:PASS@db", "--cluster-set=env.X=--password pw"]
    assert masking.masked_command(argv) == [
        "pytest", "--cluster-set", "env.DATABASE_URL=https://u:***@db", "--cluster-set=env.X=--password ***",
    ]  # fmt: skip
    profile: JSONObject = {
        "resolved": {"env": {"DATABASE_URL": url}, "thresholds": {"training.ddp.tokens_per_s_per_gpu": {}}}
    }
    shown = masking.masked_profile(profile)
    assert shown["resolved"] == {
        "env": {"DATABASE_URL": "https://u:***@proxy:3128"}, "thresholds": {"training.ddp.tokens_per_s_per_gpu": {}},
    }  # fmt: skip
    assert "PASS" not in json.dumps(masking.masked_record({"cluster": {"env": env, "note": url}}))


@pytest.mark.parametrize("name", ["MYSQL_PWD", "GITHUB_PAT", "MY_CREDS", "githubPat", "X_AUTH", "api-key"])
def test_credential_looking_names(name: str) -> None:
    assert masking.is_secret(name)


@pytest.mark.parametrize("name", ["PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "tokens_per_s_per_gpu"])
def test_a_word_inside_another_is_no_credential(name: str) -> None:
    assert not masking.is_secret(name)


def test_a_profile_adds_its_own_secret_names() -> None:
    assert not masking.is_secret("SITE_LICENCE") and masking.is_secret("SITE_LICENCE", ["licence"])
    profile: JSONObject = {"resolved": {"secret_names": ["LICENCE"], "env": {"SITE_LICENCE": "lic-1"}}}
    assert masking.masked_profile(profile)["resolved"] == {"secret_names": ["LICENCE"], "env": {"SITE_LICENCE": "***"}}
    record = {"profile": profile, "errors": ["licence=lic-1 refused"], "command": ["x", "--site-licence", "lic-1"]}
    assert "lic-1" not in json.dumps(masking.masked_record(record))


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"password": "pw 1", "user": "u"}', '{"password": "***", "user": "u"}'),
        ("{HF_TOKEN: hf_x, site: s}", "{HF_TOKEN: ***, site: s}"),
        ("password: 'p w'\nuser: u", "password: '***'\nuser: u"),
        ("db:\n  password: two words\n  user: u", "db:\n  password: ***\n  user: u"),
        ("- api_key: k 1\r\n- x: 1", "- api_key: ***\r\n- x: 1"),
        ("MYSQL_PWD=pw GITHUB_PAT=ghp_x MY_CREDS=c", "MYSQL_PWD=*** GITHUB_PAT=*** MY_CREDS=***"),
        ('DB_PASS="two words" x', 'DB_PASS="***" x'),
        ("https://user:pa@rt@host/x", "https://user:***@host/x"),
        ("https://user:pa/r@t@host:443/x?q=1", "https://user:***@host:443/x?q=1"),
        ("curl -u user:pass https://h", "curl -u user:*** https://h"),
        ("curl --user=user:pass -uadmin:pw2 h", "curl --user=user:*** -uadmin:*** h"),
        ("run --token VALUE1 --token=VALUE2", "run --token *** --token=***"),
        ("Authorization: Bearer eyJhbGciOi.xyz", "Authorization: Bearer ***"),
    ],
)
def test_a_key_value_text_inside_a_value_is_masked(text: str, shown: str) -> None:
    assert masking.masked_text(text) == shown


@pytest.mark.parametrize(
    "text", ["KeyError: 'x'", "AuthenticationError: refused", "https://example.com:8080/a", "tokens: 12", "-u alice"]
)
def test_messages_and_plain_options_stay(text: str) -> None:
    assert masking.masked_text(text) == text


def test_curl_user_option_on_the_command_line() -> None:
    assert masking.masked_command(["curl", "-u", "user:pass", "--user", "alice"]) == [
        "curl", "-u", "user:***", "--user", "alice",
    ]  # fmt: skip


def _cost(text: str) -> float:
    """The fastest of three masks of ``text``: process time, so another process's load counts less."""
    import time

    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        masking.masked_text(text)
        best = min(best, time.process_time() - start)
    return best


# a quarter of a megabyte: a quadratic pattern is still thousands of times slower than prose at this length
LONG = 2**18


@pytest.mark.parametrize(
    "token",
    [
        "https://u:" + "a" * LONG + "@h",  # a URL's password
        "x" * LONG,  # a name that never ends
        "TOKEN" * (LONG // 5),  # a name full of secret words
        "--token=" + "-" * LONG,
        "a.-" * (LONG // 3),
        "password:" * (LONG // 9),
        "\npassword: ***" * (LONG // 15),
    ],
    ids=["url", "name", "words", "option", "dots", "keys", "lines"],
)
def test_masking_a_long_token_costs_what_prose_costs(token: str) -> None:
    """Linear time: one unbroken token of ``LONG`` characters against as many characters of short words (the
    ratio of two measurements in one process; a quadratic pattern is 1000s of times slower here)."""
    prose = ("word " * (len(token) // 5 + 1))[: len(token)]
    assert _cost(token) < 20 * max(_cost(prose), 1e-3)


def test_junit_and_export_mask_what_an_older_evidence_file_still_holds() -> None:
    from acceptance.evidence.junit import junit_xml
    from acceptance.evidence.model import EvidenceDoc
    from acceptance.reports.export import csv_text

    data = leaky_evidence()
    data["errors"].append("storage: cannot mount https://u:pw-url-4@nfs/x")
    data["tests"][0]["message"] = "failed: DB_PASS=pw-db-5"
    doc = EvidenceDoc.model_validate(data)
    for text in (junit_xml(doc), csv_text(doc)):
        assert not [v for v in [*SECRETS.values(), "pw-url-4", "pw-db-5"] if v in text]
