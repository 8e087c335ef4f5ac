"""Names that become folder names or keys: the one rule for their characters.

A runner's or machine's name becomes a folder of the data branch (`nights/<name>/`) and of
asv's results; a date becomes a folder under it. `RUNNER` is the character set both accept
(the slug of perf/nightly/selection.py gives no other), `DATE` a night's folder.
"""

from __future__ import annotations

import re

RUNNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # letters, digits, '.', '_', '-'; not led by '.' or '-'
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
