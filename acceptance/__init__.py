"""cluster-acceptance: a GPU cluster acceptance-test suite shipped as a pytest plugin.

PYTEST_DONT_REWRITE: this package holds no test code. pytest marks a plugin's package for assertion
rewriting in every session; a session nested in a process that imported the package unrewritten (a
pytester run inside a test, when the outer pytest found the package through an editable install only)
would otherwise warn "Module already imported so cannot be rewritten; acceptance".
"""

__version__ = "0.1.0"
