"""TF Transform feature modules: the contract a user writes against (docs/features.md)."""
__all__ = ["taxi"]
