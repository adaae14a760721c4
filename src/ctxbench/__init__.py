"""ctxbench: which part of the context did this come from?"""

__version__ = "0.1.0"
