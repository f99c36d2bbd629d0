"""Lets a source checkout run without installation: registers the plugin unless its entry point already does."""

from importlib.metadata import entry_points

if not any(ep.value == "acceptance.plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["acceptance.plugin"]
