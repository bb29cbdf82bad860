"""Models: loading, external data, node selectors and the graph utilities."""
