"""TF Transform graphs outside Beam: the TFT feed (graph/feed.py) and the analyzer fingerprints
of a transform_fn (graph/analyze.py). TensorFlow is imported only inside the functions that
run a graph."""
__all__ = ["analyze", "feed"]
