"""memfabric.projections."""
