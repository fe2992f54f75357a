"""The sweep file: its schema (schema.py, made of sections.py's sections, the search methods'
from tuner/search/ and the data's from tuner/data/config.py), the checks across its fields
(checks.py), loading with one ``file:line: field: ...`` line per error (load.py), and its
references to the user's code (own_code.py)."""
