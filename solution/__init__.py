"""TpuGraphs runtime ranking: encode the graph once, broadcast configurations, compare them jointly."""

__version__ = "0.1.0"
