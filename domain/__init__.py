"""memfabric.domain: the pure core (aggregate, events, policy, ports, application service)."""
