"""One run on this node: ClusterRun (probes, checks, evidence), where this process stands, the launcher."""
