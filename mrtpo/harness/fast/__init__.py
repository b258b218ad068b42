"""The trainer's exact fast paths: each gives the plain computation's result, to float rounding,
in less time, and each is tested equal to the plain path it replaces.

attention.py (one attention call over a shared prefix and a trie), cascade.py (decoding on a
shared prompt cache), decode.py (the static-cache decoding step), dropout.py (one dropout mask
per trie node), head_logps.py (the vocabulary head a slice at a time), packed.py (padding-free
rows), prefix.py (the prompts' shared beginning encoded once). The recipe (`loop`, `rollout`,
`forward`, `update`) chooses them; nothing here imports the recipe or the run's files.
"""
