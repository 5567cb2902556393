"""Find the literal strings a regex cannot match without.

Every signature pattern gets a set of required literals: any line the pattern matches contains at
least one of them. Both scanners look for these literals only (hyperscan at memory speed, the
pure-Python path with bytes.find), then run the real regex on the few candidate lines. Because both
scanners see exactly the same candidate lines, they give exactly the same results.
"""

from __future__ import annotations

import re

try:  # Python 3.11+
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants
    import sre_parse

MIN_LITERAL = 4

_LIT = sre_constants.LITERAL
_SUB = sre_constants.SUBPATTERN
_BRANCH = sre_constants.BRANCH
_MAXREP = sre_constants.MAX_REPEAT
_MINREP = sre_constants.MIN_REPEAT
_POSREP = getattr(sre_constants, "POSSESSIVE_REPEAT", None)
_ATOMIC = getattr(sre_constants, "ATOMIC_GROUP", None)
_ZERO_WIDTH = {sre_constants.AT, sre_constants.ASSERT, sre_constants.ASSERT_NOT}


class LiteralError(ValueError):
    pass


def _best(options: list[list[str]]) -> list[str] | None:
    """Choose the alternative set whose weakest literal is longest (rarest in practice)."""
    usable = [o for o in options if o and all(len(s) >= 1 for s in o)]
    if not usable:
        return None
    return max(usable, key=lambda o: (min(len(s) for s in o), -len(o)))


def _seq(items: list, ignorecase: bool) -> list[list[str]]:
    """Candidate literal sets for a sequence: runs of literals, or any required sub-part's set."""
    candidates: list[list[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(["".join(run)])
            run.clear()

    for op, av in items:
        if op is _LIT:
            run.append(chr(av))
            continue
        if op in _ZERO_WIDTH:
            # \b, ^, lookarounds: they consume nothing, so a literal run continues across them
            continue
        flush()
        if op is _SUB:
            sub = av[-1]
            candidates.extend(_seq(list(sub), ignorecase))
        elif _ATOMIC is not None and op is _ATOMIC:
            candidates.extend(_seq(list(av), ignorecase))
        elif op in (_MAXREP, _MINREP) or (_POSREP is not None and op is _POSREP):
            lo, _hi, sub = av
            if lo >= 1:
                candidates.extend(_seq(list(sub), ignorecase))
        elif op is _BRANCH:
            alts: list[str] = []
            for alt in av[1]:
                best = _best(_seq(list(alt), ignorecase))
                if best is None:
                    alts = []
                    break
                alts.extend(best)
            if alts:
                candidates.append(alts)
        # anything else (IN, ANY, CATEGORY, GROUPREF...) breaks the run
    flush()
    return candidates


def required_literals(pattern: str, ignorecase: bool = False) -> list[str]:
    """Literals such that every match of `pattern` contains at least one of them.

    Raises LiteralError when no literal of at least MIN_LITERAL characters is required.
    """
    flags = re.IGNORECASE if ignorecase else 0
    try:
        parsed = sre_parse.parse(pattern, flags)
    except re.error as exc:
        raise LiteralError(f"cannot parse for literal extraction: {exc}") from exc
    best = _best(_seq(list(parsed), ignorecase))
    if not best or min(len(s) for s in best) < MIN_LITERAL:
        raise LiteralError(
            f"no required literal of {MIN_LITERAL}+ characters in {pattern!r}; "
            "add `literal:` naming a rare string every match contains"
        )
    out = sorted(set(best))
    return [s.lower() for s in out] if ignorecase else out
