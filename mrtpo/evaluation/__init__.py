"""Benchmark evaluation: the numbers the official evaluators print, for mrtpo's tasks.

    report = run_eval(get_task("instruct"), task.load(path), responses_path="responses.jsonl")
    report.metrics  # {"prompt_level_strict_acc": 0.7671, ...}

- text2sql (text2sql.py): execution accuracy in a comparison mode (Spider's bag, BIRD's set),
  and the share of predicted queries that execute;
- instruct (instruct.py): IFEval/IFBench prompt-level and instruction-level accuracy, strict
  and loose;
- toolcall (toolcall.py): BFCL AST accuracy per category, overall, and BFCL's summaries;
- any other task (generic.py): the mean of each of its rewards.
Responses come from a file (responses.py pairs rows with examples by id or prompt) or from a
model (generate.py: batched greedy decoding through the chat template).
"""
from mrtpo.evaluation.generate import GenerationConfig, generate, load_model
from mrtpo.evaluation.report import EvalReport
from mrtpo.evaluation.responses import ResponsesError, pair_responses, read_responses
from mrtpo.evaluation.run import METRICS, run_eval, score, validate_options

__all__ = ["EvalReport", "GenerationConfig", "METRICS", "ResponsesError", "generate", "load_model",
           "pair_responses", "read_responses", "run_eval", "score", "validate_options"]
