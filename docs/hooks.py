"""MkDocs hooks (``hooks:`` in mkdocs.yml): the parts of the site generated from the family registry when the
site is built, so that a family added to the registry is on the site without another edit. The
families-and-metrics page (``cluster-acceptance families --markdown``) is added whole; no generated page is
kept in git. The tiers table of running.md stands where the page marks it (``TIERS_MARK``)."""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from acceptance.cli.families import markdown
from acceptance.profile.tiers import TIERS
from acceptance.reports.table import render

REFERENCE = "reference.md"  # the page's path in the site, as the nav in mkdocs.yml names it
TIERS_PAGE = "running.md"
TIERS_MARK = "<!-- the tiers table, generated from the registry by docs/hooks.py -->"
TIERS_HEAD = ["tier", "when", "families", "budget (per node)"]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the page, in place of a file of the same name left in docs/ (one written by hand is stale)."""
    stale = files.get_file_from_path(REFERENCE)
    if stale is not None:
        files.remove(stale)
    files.append(File.generated(config, REFERENCE, content=markdown()))
    return files


def on_page_markdown(text: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """The tiers table in place of its mark; a page that should hold it and lacks the mark fails the build."""
    if page.file.src_uri != TIERS_PAGE:
        return text
    if TIERS_MARK not in text:
        raise ValueError(f"{TIERS_PAGE} lacks the mark where the tiers table goes: {TIERS_MARK}")
    return text.replace(TIERS_MARK, tiers_table(files))


def tiers_table(files: Files) -> str:
    """One row a tier: when it runs, the families it adds to the tier before it (the tiers nest; each family
    linked to its page where the site has one) and its budget."""
    rows: list[list[str]] = []
    before: set[str] = set()
    previous = None
    for tier in TIERS.values():
        added = [f for f in tier.families if f.name not in before]
        names = ", ".join(_linked(f.name, f.opt_in, files) for f in added)
        families = f"every family of `{previous}`, plus {names}" if previous else names
        rows.append([f"`{tier.name}`", tier.moment, families, tier.budget_source])
        before |= {f.name for f in added}
        previous = tier.name
    return render(TIERS_HEAD, rows, style="markdown")


def _linked(name: str, opt_in: bool, files: Files) -> str:
    page = f"families/{name}.md"
    shown = f"[{name}]({page})" if files.get_file_from_path(page) is not None else name
    return f"{shown} (opt-in)" if opt_in else shown
