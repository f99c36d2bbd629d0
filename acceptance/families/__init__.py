"""One module (or package) per family: its profile section, its descriptor, its rules (probe results in,
figures out) and its metrics with their built-in bounds. The list of families is above them
(``acceptance.profile.registry``); the modules here that are not families (``answers``, ``gpu_users``,
``heartbeat``, ``staging``) hold what several families' rules share."""
