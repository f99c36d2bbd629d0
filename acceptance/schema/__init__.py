"""What a family and a profile are written in: field types, sizes, dtypes, peaks, collective sizing, bounds,
the topology, and the ``Family`` and ``Metric`` descriptor types. Below the families, which declare
themselves with it; the list of families and the profile model built from it are above them
(``acceptance.profile``)."""
