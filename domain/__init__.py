"""memfabric.domain."""
def hello(): return 1
