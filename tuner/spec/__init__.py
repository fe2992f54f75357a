"""The sweep file: its schema (pydantic), YAML read with line numbers, the search-space
registry, and the searcher and scheduler factories that turn it into Ray Tune objects."""
