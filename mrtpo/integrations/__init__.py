"""MRTPO inside other training engines.

`mrtpo.integrations.trl`: a TRL `GRPOTrainer` subclass (install the extra: `pip install
"mrtpo[trl]"`). Nothing here is imported by `import mrtpo`, so TRL stays optional.
"""
