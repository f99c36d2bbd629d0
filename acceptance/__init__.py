"""cluster-acceptance: a GPU cluster acceptance-test suite shipped as a pytest plugin."""

__version__ = "0.1.0"
