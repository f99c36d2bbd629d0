"""Reading evidence for people: the report and the comparison of two runs."""
