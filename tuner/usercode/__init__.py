"""A user's own code: the folder it lives in taken as a snapshot that travels with the
sweep to every node and into the export (``snapshot``), and ``module:name`` references
into it imported and checked (``names``)."""
