"""Apply a patch series to a pinned PyTorch Lightning and test it."""

__version__ = "0.4.0"
