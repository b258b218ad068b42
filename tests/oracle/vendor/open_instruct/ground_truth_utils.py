"""The parts of open-instruct's `open_instruct/ground_truth_utils.py` that score IF-RLVR rows.

Extracted verbatim (Apache-2.0; see ../LICENSE and ../README.md): `VerificationResult`,
`remove_thinking_section` and `IFEvalVerifier`. The rest of the module (other verifiers, LLM
judges, network clients) is left out; `VerifierFunction` and `VerifierConfig` are reduced to
the constructor `IFEvalVerifier` calls, and `logger` is the standard library's.
"""

import ast
import dataclasses
import json
import logging

from open_instruct.IFEvalG import instructions_registry

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class VerificationResult:
    score: float
    cost: float = 0.0
    reasoning: str | None = None


VerifierConfig = object


class VerifierFunction:
    """Reduced base class: the name and weight `IFEvalVerifier.__init__` sets."""

    def __init__(self, name: str, weight: float = 1.0, verifier_config=None) -> None:
        self.name = name
        self.weight = weight
        self.verifier_config = verifier_config


def remove_thinking_section(prediction: str) -> str:
    prediction = prediction.replace("<|assistant|>", "").strip()
    # remove thinking section from the prediction
    prediction = prediction.split("</think>")[-1]
    # remove answer tags from the prediction
    prediction = prediction.replace("<answer>", "").replace("</answer>", "")
    return prediction.strip()


class IFEvalVerifier(VerifierFunction):
    """
    Verifier for ifeval tasks that delegates evaluation to a function
    specified in the constraint.

    The constraint(s) are a list of constraint ids.
    This list is found under the key "instruction_id" in the ground_truth dict.

    """

    def __init__(self, verifier_config: VerifierConfig | None = None) -> None:
        super().__init__("ifeval", weight=1.0)

    def __call__(
        self,
        tokenized_prediction: list[int],
        prediction: str,
        label: str | dict,
        query: str | None = None,
        rollout_state: dict | None = None,
    ) -> VerificationResult:
        instruction_dict = instructions_registry.INSTRUCTION_DICT
        constraint_dict = ast.literal_eval(label)
        constraint_dict = constraint_dict[0]
        if isinstance(constraint_dict, str):
            constraint_dict = json.loads(constraint_dict)
        answer = remove_thinking_section(prediction)
        instruction_keys = constraint_dict["instruction_id"]
        args_list = constraint_dict["kwargs"]
        rewards = []
        if len(prediction) == 0 or len(answer) == 0:
            logger.warning("Empty prediction received for IFEvalVerifier.")
            return VerificationResult(score=0.0)
        for instruction_key, args in zip(instruction_keys, args_list):
            if args is None:
                args = {}
            args = {k: v for k, v in args.items() if v is not None}
            instruction_cls = instruction_dict[instruction_key]
            instruction_instance = instruction_cls(instruction_key)
            instruction_instance.build_description(**args)
            if prediction.strip() and instruction_instance.check_following(answer):
                rewards.append(1.0)
            else:
                rewards.append(0.0)
        return VerificationResult(score=sum(rewards) / max(len(rewards), 1))
