"""The acceptance suite; installed as ``acceptance.suite`` (``cluster-acceptance run`` runs it from there)."""
