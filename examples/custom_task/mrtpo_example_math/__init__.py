"""A worked mrtpo custom task (see task.py); registered as `math-word` by the entry point in
pyproject.toml."""
from mrtpo_example_math.task import MathWordTask

__all__ = ["MathWordTask"]
