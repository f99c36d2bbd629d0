"""``cluster-acceptance`` and the other commands: sweep, bench_train, the container entry point."""
