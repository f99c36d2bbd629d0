"""The suite's parametrization lives in each test module (``pytest_generate_tests`` there), its order and
markers in the plugin (``acceptance.plugin``), both from the family registry."""
