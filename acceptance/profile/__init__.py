"""Profiles: loading with file:line errors, the section models, the metric registry, sizes, bounds."""
