"""MkDocs hooks (``hooks:`` in mkdocs.yml): the families-and-metrics page, generated from the family registry
when the site is built (``cluster-acceptance families --markdown``). No generated page is kept in git, so a
family added to the registry is on the site without another edit."""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from acceptance.cli.families import markdown

REFERENCE = "reference.md"  # the page's path in the site, as the nav in mkdocs.yml names it


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the page, in place of a file of the same name left in docs/ (one written by hand is stale)."""
    stale = files.get_file_from_path(REFERENCE)
    if stale is not None:
        files.remove(stale)
    files.append(File.generated(config, REFERENCE, content=markdown()))
    return files
