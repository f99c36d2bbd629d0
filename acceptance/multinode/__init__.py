"""The nodes of a multi-node run agree on one plan: pure data (plan) and the shared store (meeting)."""
