"""Profiles shipped with the package (this folder is installed as ``acceptance.thresholds``)."""
