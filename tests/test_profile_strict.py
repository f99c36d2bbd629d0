"""Strict profiles: duplicate keys, numbers that are not finite or not numbers, bounds that can never or
always hold, unreadable files, bad run options; each one usage line naming where, the key and what was
expected, before anything runs. The ``--cluster-set`` values follow the same rules as the file."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from acceptance.profile.arguments import positive_seconds
from acceptance.profile.loader import load
from acceptance.profile.strict_yaml import StrictLoader
from tests.harness import PLUGIN_ARGS
from tests.test_profile import BASE, error_of, write

THRESHOLDS = f"name: p\n{BASE}thresholds:\n"  # threshold entries start on line 4
REPLACED = "(the second would silently replace the first)"
AS_UTF8 = "save the profile as UTF-8"


@pytest.mark.parametrize(
    ("body", "where", "first"),
    [
        (
            "  connectivity.world_size: {eq: 2}\nthresholds:\n  connectivity.rendezvous_s: {max: 5}\n",
            ":5: thresholds:",
            3,
        ),
        (
            "  connectivity.rendezvous_s: {max: 5}\n  connectivity.rendezvous_s: {max: 50}\n",
            ":5: thresholds.connectivity.rendezvous_s:",
            4,
        ),
        ("  connectivity.rendezvous_s:\n    max: 5\n    max: 50\n", ":6: thresholds.connectivity.rendezvous_s.max:", 5),
        (
            "  connectivity.rendezvous_s: {max: 5, source: a, max: 50}\n",
            ":4: thresholds.connectivity.rendezvous_s.max:",
            4,
        ),
        (
            "  connectivity.world_size: {eq: 2}\ncollectives:\n  iters: 3\n  sizes: [1M]\n  iters: 4\n",
            ":8: collectives.iters:",
            6,
        ),
    ],
)
def test_duplicate_key_names_both_lines(here: Path, body: str, where: str, first: int) -> None:
    write(here, "p", THRESHOLDS + body)
    assert error_of("p") == (
        f"thresholds/p.yaml{where} duplicate key, first set at thresholds/p.yaml:{first} {REPLACED}"
    )


def test_merge_keys_are_not_duplicates(here: Path) -> None:
    body = "  connectivity.rendezvous_s: &r {max: 5, source: a}\n  connectivity.barrier_latency_us: {<<: *r, max: 7}\n"
    write(here, "p", THRESHOLDS + body)
    bound = load("p").threshold("connectivity.barrier_latency_us")
    assert bound is not None and (bound.max, bound.source) == (7, "a")


def test_duplicate_key_in_a_cluster_set_value() -> None:
    message = error_of("local-cpu", ["thresholds.connectivity.rendezvous_s={max: 1, max: 2}"])
    assert message.startswith(
        "--cluster-set 'thresholds.connectivity.rendezvous_s={max: 1, max: 2}' (value column 10): "
    )
    assert "thresholds.connectivity.rendezvous_s.max: duplicate key, first set at " in message
    assert message.endswith(f"(value column 2) {REPLACED}")


def test_recursive_alias(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}env: &e {{A: *e}}\n")
    assert error_of("p") == "thresholds/p.yaml:3: env.A: an alias refers to a node that contains it"


def test_exponent_numbers_are_numbers(here: Path) -> None:
    body = (
        "  connectivity.rendezvous_s: {max: 1e2}\n  connectivity.barrier_latency_us: {max: 1.0e12}\n"
        "  connectivity.p2p_min_gbps: {min: 3E-2}\n  compute.matmul_tflops_min: {ref: 2.5e+1, tol: 5e-1}\n"
    )
    write(here, "p", THRESHOLDS + body + "env: {A: '1e3'}\n")
    profile = load("p")
    bounds = {name: bound.model_dump(exclude_none=True) for name, bound in profile.model.thresholds.items()}
    assert bounds == {
        "connectivity.rendezvous_s": {"max": 100.0},
        "connectivity.barrier_latency_us": {"max": 1e12},
        "connectivity.p2p_min_gbps": {"min": 0.03},
        "compute.matmul_tflops_min": {"ref": 25.0, "tol": 0.5},
    }
    assert profile.model.env == {"A": "1e3"}  # quoted: still a string
    forms = ["1e12", "1.0e12", "-3E-2", "+.5e1", "1_000e0", "1.0e+12"]
    assert [yaml.load(form, StrictLoader) for form in forms] == [1e12, 1e12, -0.03, 5.0, 1000.0, 1e12]
    assert [yaml.load(form, StrictLoader) for form in ("e12", "1e", "0x1e2", "1e12a")] == ["e12", "1e", 482, "1e12a"]


@pytest.mark.parametrize(
    ("text", "where", "shown"),
    [
        (
            "thresholds:\n  connectivity.rendezvous_s: {max: .inf}\n",
            "4: thresholds.connectivity.rendezvous_s.max",
            "inf",
        ),
        (
            "thresholds:\n  connectivity.p2p_min_gbps: {min: -.inf}\n",
            "4: thresholds.connectivity.p2p_min_gbps.min",
            "-inf",
        ),
        ("thresholds:\n  connectivity.world_size: {eq: .nan}\n", "4: thresholds.connectivity.world_size.eq", "nan"),
        (
            "thresholds:\n  connectivity.p2p_min_gbps: {ref: .NaN, tol: 0.1}\n",
            "4: thresholds.connectivity.p2p_min_gbps.ref",
            "nan",
        ),
        (
            "thresholds:\n  connectivity.p2p_min_gbps: {ref: 3, tol: .inf}\n",
            "4: thresholds.connectivity.p2p_min_gbps.tol",
            "inf",
        ),
        ("timeouts: {default: .inf}\n", "3: timeouts.default", "inf"),
        ("compute: {duration_s: .inf}\n", "3: compute.duration_s", "inf"),
        ("training:\n  lr: .nan\n", "4: training.lr", "nan"),
    ],
)
def test_non_finite_numbers(here: Path, text: str, where: str, shown: str) -> None:
    write(here, "p", f"name: p\n{BASE}{text}")
    assert (
        error_of("p") == f"invalid profile:\n  thresholds/p.yaml:{where}: Input should be a finite number (got {shown})"
    )


@pytest.mark.parametrize(
    ("bound", "where", "why"),
    [
        ("{min: 50000, max: 10}", "", "min 50000 is above max 10: no value can meet both"),
        ("{eq: 3, min: 1}", "", "eq cannot be combined with min or max"),
        ("{ref: 3, tol: -0.1}", ".tol", "Input should be greater than or equal to 0 (got -0.1)"),
        ("{max: -1}", ".max", "max -1 can never hold: this figure is never below 0"),
        ("{eq: -2}", ".eq", "eq -2 can never hold: this figure is never below 0"),
        ("{ref: -5, tol: 0.5}", ".ref", "ref -5 ± 50% can never hold: this figure is never below 0"),
        ("{min: 0}", ".min", "min 0 always holds: this figure is never below 0 (raise it, or remove it to record"),
        ("{min: -3, max: 10}", ".min", "min -3 always holds: this figure is never below 0"),
    ],
)
def test_bounds_that_never_or_always_hold(here: Path, bound: str, where: str, why: str) -> None:
    write(here, "p", f"{THRESHOLDS}  connectivity.rendezvous_s: {bound}\n")
    assert f"thresholds/p.yaml:4: thresholds.connectivity.rendezvous_s{where}: {why}" in error_of("p")


def test_bounds_at_the_floor_that_can_fail_are_kept(here: Path) -> None:
    body = "  connectivity.p2p_wrong: {max: 0}\n  connectivity.world_size: {eq: 0}\n"
    body += "  connectivity.p2p_min_gbps: {min: 1e-3}\n  connectivity.rendezvous_s: {min: 5, max: 5}\n"
    write(here, "p", THRESHOLDS + body)
    assert set(load("p").model.thresholds) == {
        "connectivity.p2p_wrong",
        "connectivity.world_size",
        "connectivity.p2p_min_gbps",
        "connectivity.rendezvous_s",
    }


def test_profile_that_is_not_utf8(here: Path) -> None:
    path = here / "thresholds" / "p.yaml"
    path.write_bytes(f"name: p\n{BASE}description: caf".encode() + b"\xe9 cr\xe8me\n")
    assert error_of("p") == (
        f"thresholds/p.yaml: not UTF-8 text: byte 0xe9 at byte offset {path.read_bytes().index(0xE9)} "
        f"(invalid continuation byte); {AS_UTF8}"
    )


def test_parent_that_is_not_utf8(here: Path) -> None:
    (here / "thresholds" / "parent.yaml").write_bytes(b"name: parent\ndescription: \xff\n")
    write(here, "child", "name: child\nextends: parent\n")
    assert error_of("child") == (
        f"thresholds/parent.yaml: not UTF-8 text: byte 0xff at byte offset 26 (invalid start byte); {AS_UTF8}"
    )


def test_control_character(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}description: a\x00b\n")
    assert error_of("p") == "thresholds/p.yaml:3: special characters are not allowed (#x0000)"


@pytest.mark.parametrize("override", ["collectives.iters=", "collectives.iters= ", "thresholds=", "env.A="])
def test_cluster_set_empty_value(override: str) -> None:
    assert error_of("local-cpu", [override]) == (
        f"--cluster-set {override!r}: empty value (expected KEY.PATH=VALUE; KEY.PATH=null removes a key)"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "thresholds.connectivity.rendezvous_s.max=.inf",
            "rendezvous_s.max: Input should be a finite number (got inf)",
        ),
        ("timeouts.default=.nan", "timeouts.default: Input should be a finite number (got nan)"),
        ("thresholds.connectivity.rendezvous_s.min=-3E-2", "rendezvous_s.min: min -0.03 always holds"),
        ("thresholds.connectivity.rendezvous_s={min: 5, max: 1}", "rendezvous_s: min 5 is above max 1"),
    ],
)
def test_cluster_set_is_as_strict_as_the_file(override: str, message: str) -> None:
    error = error_of("local-cpu", [override])
    assert error.startswith(f"invalid profile:\n  --cluster-set {override}: ") and message in error


@pytest.mark.parametrize("text", ["0", "-5", "nan", "inf", "-inf", "soon", ""])
def test_positive_seconds_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected a finite number of seconds above 0, got {text!r}"):
        positive_seconds(text)


def test_positive_seconds_accepts() -> None:
    assert [positive_seconds(t) for t in ("20", "0.5", "1e3")] == [20.0, 0.5, 1000.0]


def test_sha256_reveals_no_secret(here: Path) -> None:
    write(here, "p", f"name: p\n{BASE}env: {{HF_TOKEN: hf_real, NCCL_DEBUG: WARN}}\n")
    profile = load("p")
    guess = load("p", ["env.HF_TOKEN=hf_guess"])
    assert profile.sha256 == guess.sha256  # a guess of the token cannot be confirmed against the digest
    assert profile.model.env["HF_TOKEN"] == "hf_real"  # the run itself still gets the real value
    masked = {**profile.resolved, "env": {"HF_TOKEN": "***", "NCCL_DEBUG": "WARN"}}
    assert profile.sha256 == hashlib.sha256(json.dumps(masked, sort_keys=True).encode()).hexdigest()
    assert load("p", ["env.NCCL_DEBUG=INFO"]).sha256 != profile.sha256  # other values still count


CPU = "name: bad\ntopology: {device: cpu, backend: gloo, ranks_per_node: 2}\n"


@pytest.mark.parametrize(
    ("content", "args", "error"),
    [
        (
            CPU + "thresholds: {connectivity.world_size: {eq: 2}}\nthresholds: {connectivity.p2p_wrong: {eq: 0}}\n",
            (),
            f"bad.yaml:4: thresholds: duplicate key, first set at bad.yaml:3 {REPLACED}",
        ),
        (
            CPU.encode() + b"description: \xe9t\xe9\n",
            (),
            f"bad.yaml: not UTF-8 text: byte 0xe9 at byte offset 81 (invalid continuation byte); {AS_UTF8}",
        ),
        (
            CPU,
            ("--cluster-set", "collectives.iters="),
            "--cluster-set 'collectives.iters=': empty value (expected KEY.PATH=VALUE; KEY.PATH=null removes a key)",
        ),
    ],
)
@pytest.mark.e2e
def test_bad_input_is_one_usage_line(
    suite: pytest.Pytester, content: str | bytes, args: tuple[str, ...], error: str
) -> None:
    bad = suite.path / "bad.yaml"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = suite.runpytest_subprocess(*PLUGIN_ARGS, "--cluster-profile", "bad.yaml", *args, "tests_cluster/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.strip()] == [f"ERROR: {error}"]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (suite.path / "acceptance-results").exists()  # refused before anything ran


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
@pytest.mark.e2e
def test_bad_cluster_timeout_is_a_usage_error(suite: pytest.Pytester, value: str) -> None:
    result = suite.runpytest_subprocess(
        *PLUGIN_ARGS, "--cluster-profile", "local-cpu", "--cluster-timeout", value, "tests_cluster/"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*error: argument --cluster-timeout: expected a finite number of seconds above 0, got '{value}'"]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (suite.path / "acceptance-results").exists()


@pytest.mark.e2e
def test_an_env_key_with_an_equals_sign_is_a_usage_error_naming_file_and_key(suite: pytest.Pytester) -> None:
    """os.environ refuses the name with a traceback (an INTERNALERROR, exit 3) once the run has started."""
    (suite.path / "bad.yaml").write_text(CPU + 'env:\n  "A=B": "1"\n')
    result = suite.runpytest_subprocess(*PLUGIN_ARGS, "--cluster-profile", "bad.yaml", "tests_cluster/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line.strip() for line in result.errlines if line.strip()] == [
        "ERROR: invalid profile:",
        "bad.yaml:4: env.A=B.[key]: not an environment variable's name: it must be non-empty, without '=' or NUL "
        "(got 'A=B')",
    ]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
