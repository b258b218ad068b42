"""mrtpo: multi-reward RL for language models, with each reward's credit on its relevant tokens."""
__version__ = "0.1.0"
