"""output_validity: what each variant returned is output at all, with no baseline to compare with.

Per variant, every returned token id must lie in [0, vocab_size) and below the tokenizer's size
(the ids between are the padding of a padded vocabulary: no token), and the returned text must
decode: present wherever ids are, and free of U+FFFD (bytes that were not UTF-8). A server can fail
this on its own while accept length looks fine (SGLang #26358: 96% invalid output on ROCm; #35872:
an out-of-vocabulary id). The sizes are the rule's `vocab_size` / `tokenizer_size` when given, else
what the run recorded of the served model (sglang_spec_harness.run.vocabulary); unknown sizes leave
the ids unjudged (INCONCLUSIVE), never passed.
"""

from __future__ import annotations

from sglang_spec_harness.rundir import Precondition, RunDir, Vocabulary
from sglang_spec_harness.rundir.models import OutputValidityResult
from sglang_spec_harness.rundir.rule_numbers import InvalidToken, OutputValidityNumbers, VariantValidity
from sglang_spec_harness.scenario import OutputValidityRule
from sglang_spec_harness.verdict.evidence import ReturnedOutput, returned_outputs, served_vocabularies
from sglang_spec_harness.verdict.rules.result import failed_preconditions, rule_result
from sglang_spec_harness.vocabulary import FAIL, INCONCLUSIVE, PASS

RULE_NAME = "outputs_valid"  # the rule the flow adds to a run whose scenario declares none
EXAMPLES = 5
REPLACEMENT_CHARACTER = "\ufffd"


def _vocabulary(run: RunDir, rule: OutputValidityRule, variant: str) -> tuple[Vocabulary | None, str]:
    """The sizes to judge ids by, and where they came from (or why there are none)."""
    recorded = served_vocabularies(run, variant)
    known = [v for v in recorded if v is not None]
    if rule.vocab_size is not None:
        tokenizer = rule.tokenizer_size or (known[0].tokenizer_size if known else rule.vocab_size)
        return Vocabulary(vocab_size=rule.vocab_size, tokenizer_size=min(tokenizer, rule.vocab_size),
                          source="the rule"), ""
    if not recorded:
        return None, "the run recorded no vocabulary (a run before 0.2.0): give vocab_size in the rule"
    if len(known) < len(recorded):
        return None, "its server's vocabulary is unknown (no vocab_size from /model_info or the model's config.json)"
    if len({(v.vocab_size, v.tokenizer_size) for v in known}) > 1:
        return None, "its servers recorded different vocabularies"
    vocab = known[0]
    if rule.tokenizer_size is not None:
        vocab = vocab.model_copy(update={"tokenizer_size": min(rule.tokenizer_size, vocab.vocab_size)})
    return vocab, ""


def count_invalid(outputs: list[ReturnedOutput], vocab: Vocabulary | None) -> VariantValidity:
    """One variant's tokens and texts counted; ids are judged only where `vocab` is known."""
    counted = VariantValidity(requests=len(outputs))
    examples: list[InvalidToken] = []
    tokens = out_of_range = padding = texts = invalid_texts = 0
    for out in outputs:
        tokens += len(out.output_ids)
        if out.text is not None:
            texts += 1
            invalid_texts += int(REPLACEMENT_CHARACTER in out.text)
        if vocab is None:
            continue
        for position, token in enumerate(out.output_ids):
            why = "out_of_range" if not 0 <= token < vocab.vocab_size else (
                "padding" if token >= vocab.tokenizer_size else None)
            if why is None:
                continue
            out_of_range += why == "out_of_range"
            padding += why == "padding"
            if len(examples) < EXAMPLES:
                examples.append(InvalidToken(trial=out.trial, request_index=out.request_index, position=position,
                                             token=token, why=why))
    return counted.updated(
        tokens=tokens, out_of_range=out_of_range, padding=padding, texts=texts, invalid_texts=invalid_texts,
        invalid_fraction=(out_of_range + padding) / tokens if vocab is not None and tokens else None,
        vocab_size=vocab.vocab_size if vocab else None, tokenizer_size=vocab.tokenizer_size if vocab else None,
        vocabulary_source=vocab.source if vocab else None, examples=examples)


def _failure(variant: str, counted: VariantValidity, limit: float) -> str | None:
    parts = []
    fraction = counted.invalid_fraction
    if fraction is not None and fraction > limit:
        first = counted.examples[0] if counted.examples else None
        where = (f"; first: request {first.request_index} token {first.position} = {first.token} ({first.why.replace('_', ' ')})"
                 if first else "")
        parts.append(f"{counted.out_of_range + counted.padding} of {counted.tokens} token ids are not tokens "
                     f"({counted.out_of_range} outside [0, {counted.vocab_size}), {counted.padding} padding ids "
                     f">= {counted.tokenizer_size}){where}")
    if counted.invalid_texts:
        parts.append(f"{counted.invalid_texts} of {counted.texts} texts hold U+FFFD (bytes that are not UTF-8)")
    return f"{variant}: " + "; ".join(parts) if parts else None


def evaluate_output_validity(run: RunDir, rule: OutputValidityRule) -> OutputValidityResult:
    variants = rule.variants or list(run.scenario.variants)
    preconditions: list[Precondition] = []
    counted: dict[str, VariantValidity] = {}
    for variant in variants:
        outputs = returned_outputs(run, variant)
        vocab, why_unknown = _vocabulary(run, rule, variant)
        counted[variant] = count_invalid(outputs, vocab)
        preconditions.append(Precondition(f"{variant}: returned tokens", bool(outputs),
                                          f"{len(outputs)} request(s) returned tokens"))
        preconditions.append(Precondition(f"{variant}: vocabulary", vocab is not None,
                                          vocab.source if vocab else why_unknown))
    numbers = OutputValidityNumbers(variants=counted, max_invalid_fraction=rule.max_invalid_fraction)
    failures = [f for v in variants if (f := _failure(v, counted[v], rule.max_invalid_fraction))]
    if failures:  # invalid output is invalid whatever else could not be judged
        return rule_result(OutputValidityResult, rule, FAIL, "; ".join(failures), numbers, preconditions)
    blocked = failed_preconditions(preconditions)
    if blocked:
        return rule_result(OutputValidityResult, rule, INCONCLUSIVE, blocked, numbers, preconditions)
    summary = ", ".join(f"{v} {counted[v].tokens} tokens in {counted[v].requests} requests" for v in variants)
    return rule_result(OutputValidityResult, rule, PASS, f"every token id a token and every text decoded: {summary}",
                       numbers, preconditions)


def implicit_rule(run: RunDir) -> OutputValidityRule | None:
    """The rule a run is judged by when its scenario declares none: every run whose trials recorded
    their server's vocabulary (runs before that keep the verdict they had)."""
    if any(isinstance(r, OutputValidityRule) for r in run.scenario.rules):
        return None
    if not any("vocabulary" in t.record.model_fields_set for t in run.trials):
        return None
    return OutputValidityRule(name=RULE_NAME, kind="output_validity",
                              description="every returned token id is a token and every text decodes (added to every run)")
