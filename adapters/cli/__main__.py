"""``python -m memfabric.adapters.cli``: the ``memfabric`` command."""

from memfabric.adapters.cli.app import app

app(prog_name="memfabric")
