"""TF Transform graphs outside Beam: the TFT feed (graph/feed.py) and the analyzer fingerprints
of a transform_fn (graph/analyze.py). TensorFlow is imported only inside the functions that
run a graph, through graph/quiet.py (without its native start-up lines)."""
__all__ = ["analyze", "feed", "quiet"]
