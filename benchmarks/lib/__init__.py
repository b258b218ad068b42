"""What the benchmark scripts share, one home per concept:

- `setting`: the setting a script measures in (mrtpo train's config for a model and task, the
  task, the first batch's examples, the policy with a moved LoRA adapter, the loop's seeded
  sampler) and a random-initialised policy of a given shape;
- `stats`: the intervals (Student t over batches or rounds; the paired bootstrap over seeds and
  held-out examples);
- `runs`: training runs in their own process, read back, kept beside a results file and read
  from there;
- `results`: writing a results file with its kind declared, and where a result was measured
  (commit, CPU).
"""
