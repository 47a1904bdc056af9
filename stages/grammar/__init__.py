"""Grammar-constrained decoding: tool calls compiled against a stage's tokenizer, matchers, logit masks."""

from stages.grammar.compiler import ConstraintCompiler
from stages.grammar.logit_mask import masked_logits
from stages.grammar.matcher import ToolCallMatcher

__all__ = ["ConstraintCompiler", "ToolCallMatcher", "masked_logits"]
