"""The blank-strength check's report on one notebook: its counts and its failures."""

from __future__ import annotations

from dataclasses import dataclass, field

from autograder.strength.plan import BlankCase

# a sampled mutant of a blank the drill verdicts cover (autograder/drill_verdicts.py): not run
SETTLED = "failed its hidden test when the drill verdicts were computed"


@dataclass
class Report:
    assignment: str
    cases: list[BlankCase]
    errors: list[str] = field(default_factory=list)  # e.g. a reference failing its own test
    sampled: bool = False  # one generated mutant per blank

    def counts(self, cases: list[BlankCase] | None = None) -> dict:
        pairs = [(m, case.outcomes.get(m.text)) for case in (cases or self.cases)
                 for m in case.mutants]
        caught = [o for m, o in pairs if o and not m.accepted and not o.passed]
        return {"blanks": len(cases or self.cases),
                "mutants": len(pairs), "caught": len(caught),
                "by timeout": sum(o.timed_out for o in caught),
                "accepted": sum(1 for m, o in pairs if o and m.accepted and o.passed),
                "settled": sum(1 for _, o in pairs if o and o.reason == SETTLED),
                "seconds": sum(o.seconds for _, o in pairs if o)}

    def failures(self) -> list[str]:
        lines = list(self.errors)
        for case in self.cases:
            lines += [f"{case.label()}: {problem}" for problem in case.problems]
            for mutant in case.mutants:
                outcome = case.outcomes.get(mutant.text)  # None: no test, or its reference failed
                if outcome is None:
                    continue
                if outcome.passed and not mutant.accepted:
                    lines.append(f"{case.label()}: SURVIVES `{mutant.text}` ({mutant.kind}): "
                                 "the hidden test passes")
                elif not outcome.passed and mutant.accepted:
                    lines.append(f"{case.label()}: ACCEPTED `{mutant.text}` fails the hidden "
                                 f"test: {outcome.reason}")
        return lines

    def text(self, verbose: bool = False) -> str:
        c = self.counts()
        mutants = "mutants (one generated per blank)" if self.sampled else "mutants"
        out = [f"{self.assignment}: {c['blanks']} blanks, {c['mutants']} {mutants}, "
               f"{c['caught']} caught ({c['by timeout']} by timeout, {c['settled']} by the drill "
               f"verdicts), {c['accepted']} accepted ({c['seconds']:.1f} s of mutant runs)"]
        for name in dict.fromkeys(case.function for case in self.cases):
            cases = [case for case in self.cases if case.function == name]
            f = self.counts(cases)
            out.append(f"  {name:<28} {f['blanks']:>2} blanks {f['mutants']:>4} mutants "
                       f"{f['caught']:>4} caught {f['accepted']:>2} accepted "
                       f"{f['seconds']:>6.1f} s")
            for case in cases if verbose else []:
                out.append(f"    [{case.blank.number}] {case.where} `{case.blank.answer}`")
                for mutant in case.mutants:
                    o = case.outcomes.get(mutant.text)
                    verdict = ("not run" if o is None else "passes" if o.passed else
                               "timed out" if o.timed_out else "fails")
                    out.append(f"        {verdict:<9} `{mutant.text}` ({mutant.kind})")
        out += [f"  FAIL {line}" for line in self.failures()]
        return "\n".join(out)
