"""The command line (``memfabric ...``, typer + rich).

``app`` assembles the typer app; ``common``, ``render`` and ``fabric`` are the leaves the
command modules share (options and errors, tables, opening a fabric for a command); the
command modules (``admin``, ``projections``, ``audit``, ``lifecycle``, ``mcp``,
``console``, ``entities``, ``access``, ``replica``) register their commands on it;
``demo`` (with ``demo_access``, ``demo_entities``) is ``memfabric demo``. Nothing here is
imported by the library outside the command line.
"""
