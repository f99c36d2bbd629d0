"""Every writer safe for every reader: whatever text the evidence holds (a host name, a metric name, a
message from a storage path), the JUnit parses, report.md renders no element of it, a number prints in a
few characters, and an evidence file too large or not valid Unicode is a usage error naming the file."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import markdown
import pytest

from acceptance.cli.main import main
from acceptance.evidence import store
from acceptance.evidence.junit import junit_xml
from acceptance.evidence.store import EvidenceError, read_evidence
from acceptance.numbers import fmt
from tests.harness import ROOT

FAIL = ROOT / "tests" / "data" / "evidence-fail.json"
# text an attacker (or a storage path, or a terminal's colours) puts into the evidence
PAYLOAD = (
    "<script>alert(1)</script> <img src=x onerror=alert(2)> [link](javascript:alert(3)) ![i](x.png) "
    "*em* **strong** _under_ `code` <b>bold</b> &lt;i&gt; \\<u>u</u> | pipe"
)


def evidence(text: str) -> dict[str, Any]:
    """The failing fixture with ``text`` in a host name, a metric name, a message and a run error."""
    data = json.loads(FAIL.read_text())
    data["topology"]["host"] = f"host{text}"
    data["cluster"]["nodes"] = [{"host": f"node{text}", "node_rank": 0, "devices": []}]
    data["cluster"]["software"]["driver"] = f"driver{text}"
    test = data["tests"][0]
    test["checks"][0]["metric"] = f"collectives.metric{text}"
    test["message"] = f"message{text}"
    data["probes"][1]["error"] = f"probe{text}"
    data["errors"].append(f"# error{text}\n- {text}\n    {text}\n\n1. {text}\n> {text}\n===")
    data["profile"]["name"] = f"profile{text}"
    data["command"] = ["pytest", f"--x={text}", "`tick``"]
    return data


class Tags(HTMLParser):
    """The elements of a rendered page, with their attributes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, tuple[str, ...]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(sorted(name for name, _ in attrs))))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


# what mkdocs sites and python-markdown users commonly switch on: attribute lists, raw HTML in blocks,
# definitions, footnotes, abbreviations (all in "extra"), admonitions, a table of contents
EXTENSIONS = ["extra", "admonition", "toc", "sane_lists"]
# constructs those extensions read in a text: an attribute list on its own line and after text, a link
# definition, an abbreviation, a footnote, a definition list, an admonition, raw HTML with markdown inside
CONSTRUCTS = (
    "{: onclick=alert(1) }\nword {: #id .cls onclick=alert(2) }\n[x]: https://evil.example/ 'title'\n"
    '*[HTML]: Hyper Text\n[^1]: a footnote\nTerm\n: a definition\n!!! note "t"\n    body\n'
    '<div markdown="1">**x**</div>\n[TOC]\n'
)


def rendered(tmp_path: Path, text: str, extensions: tuple[str, ...] = ("tables",)) -> Tags:
    folder = tmp_path / str(abs(hash((text, extensions))))
    folder.mkdir()
    (folder / "evidence.json").write_text(json.dumps(evidence(text)))
    assert main(["report", str(folder)]) == 0
    page = markdown.markdown((folder / "report.md").read_text(), extensions=list(extensions))
    tags = Tags()
    tags.feed(page)
    return tags


def test_report_md_renders_no_element_from_the_evidence_text(tmp_path: Path) -> None:
    plain = rendered(tmp_path, "plain")
    hostile = rendered(tmp_path, PAYLOAD)
    # the same elements as for harmless text: the evidence's text added none (no script, link, image, em)
    assert hostile.tags == plain.tags
    assert not [tag for tag in hostile.tags if tag[0] in ("script", "img", "a", "b", "u")]
    shown = "".join(hostile.text)
    assert "<script>alert(1)</script>" in shown and "**strong**" in shown and "`code`" in shown  # as text


def test_report_md_renders_no_construct_of_the_common_extensions(tmp_path: Path) -> None:
    plain = rendered(tmp_path, "plain", tuple(EXTENSIONS))
    for text in (CONSTRUCTS, CONSTRUCTS.replace("\n", " "), "\n{: onclick=alert(1) }", " {: onclick=alert(1) }"):
        hostile = rendered(tmp_path, text, tuple(EXTENSIONS))
        assert hostile.tags == plain.tags  # no attribute, link, abbreviation, footnote, definition, note
        assert "{: onclick=alert(1) }" in "".join(hostile.text)


def test_junit_of_any_text_parses(tmp_path: Path) -> None:
    data = evidence("\x1b[31mred\x1b[0m \x00 \x07 \ufffe <&>")
    (tmp_path / "evidence.json").write_text(json.dumps(data))
    xml = junit_xml(read_evidence(tmp_path))
    root = ET.fromstring(xml)  # Expat: every character well-formed
    assert "\\x1b[31mred" in xml and "<&>" in "".join(root.itertext()) + xml.replace("&lt;&amp;&gt;", "<&>")


@pytest.mark.parametrize(
    ("value", "longest"),
    [(1e308, 12), (-1e308, 12), (10**400, 12), (1.5e-320, 12), (123456789012.0, 15), (0.5, 3), (312.4, 5)],
    ids=["1e308", "-1e308", "int-1e400", "1.5e-320", "1.2e11", "0.5", "312.4"],
)
def test_numbers_print_short_at_any_magnitude(value: float, longest: int) -> None:
    shown = fmt(value)
    assert len(shown) <= longest, shown
    assert abs(Decimal(shown.replace(",", "")) / Decimal(value) - 1) < Decimal("1e-3")


def test_oversized_evidence_is_a_usage_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "evidence.json"
    path.write_text(FAIL.read_text())
    monkeypatch.setattr(store, "MAX_EVIDENCE_BYTES", 1000)
    with pytest.raises(EvidenceError, match=f"{path}: .*larger than"):
        read_evidence(path)
    assert main(["junit", str(path)]) == 4
    assert str(path) in capsys.readouterr().err


def test_a_lone_surrogate_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "evidence.json"
    path.write_text(FAIL.read_text().replace('"needs 2 ranks"', '"needs \\ud800 ranks"'))
    with pytest.raises(EvidenceError, match=f"{path}: .*Unicode"):
        read_evidence(path)
    for command in (["report", str(path)], ["junit", str(path)]):
        assert main(command) == 4
        assert str(path) in capsys.readouterr().err
