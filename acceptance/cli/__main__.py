"""``python -m acceptance.cli``: the same as the ``cluster-acceptance`` console script."""

from acceptance.cli.main import main

raise SystemExit(main())
