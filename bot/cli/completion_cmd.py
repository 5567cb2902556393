"""`triage completion bash|zsh`: print a shell completion script made from the parser itself.

    eval "$(triage completion bash)"        # ~/.bashrc, or save it to /etc/bash_completion.d/triage
    eval "$(triage completion zsh)"         # ~/.zshrc after compinit, or save it as _triage in $fpath

The script holds a table (command path -> subcommands, options, option choices) taken from the
argparse parser, so it cannot drift from the commands; no argcomplete, and nothing runs Python at
completion time. Both shells share one word function, `_triage_words`, that prints the candidates
(and `@files` where a path may follow); tests/test_completion.py runs it in real bash and zsh.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh")


@dataclass
class Level:
    """One command path (e.g. "signatures test"): what may follow it."""

    subcommands: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    valued: dict[str, list[str]] = field(default_factory=dict)  # option taking a value -> its candidates
    positional_choices: list[str] = field(default_factory=list)
    positional_files: bool = False


_PATHLIKE = ("PATH", "FILE", "DIR", "F")


def _wants_files(action: argparse.Action) -> bool:
    """Whether the action's value is a path: told by its metavar or name (argparse has no types for it)."""
    meta = str(action.metavar or "").upper()
    return meta in _PATHLIKE or action.dest.endswith(("_file", "_dir", "_map", "paths"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print a bash or zsh completion script")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=run)


def levels(parser: argparse.ArgumentParser, path: str = "") -> dict[str, Level]:
    """Every command path of `parser`, depth first; "" is the top level."""
    lvl = Level()
    out = {path: lvl}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                lvl.subcommands.append(name)
                out.update(levels(child, f"{path} {name}".strip()))
        elif action.option_strings:
            lvl.options += action.option_strings
            if action.nargs != 0:
                words = [str(c) for c in action.choices or ()] or (["@files"] if _wants_files(action) else [])
                for opt in action.option_strings:
                    lvl.valued[opt] = words
        elif action.choices:
            lvl.positional_choices += [str(c) for c in action.choices]
        elif _wants_files(action):
            lvl.positional_files = True
    return out


def _words_function(table: dict[str, Level]) -> str:
    """POSIX-ish shell that bash and zsh both run alike: prints the candidates for the word being typed.

    Arguments: the words before the cursor (program name first). Subcommands are recognised only
    where they can occur, so an option's value that happens to be called `list` is not a command.
    """
    paths = [p for p in table if p]
    lines = [
        "_triage_words() {",
        '  local cmdpath="" prev="" w',
        "  shift",
        '  for w in "$@"; do',
        '    case "$w" in -*) prev="$w"; continue ;; esac',
        '    case "$cmdpath|$prev" in',
    ]
    # a word right after an option that takes a value is that value, not a command
    valued = sorted({f"{p}|{opt}" for p, lvl in table.items() for opt in lvl.valued})
    if valued:
        lines.append(f"      {'|'.join(shlex.quote(v) for v in valued)}) prev=\"\"; continue ;;")
    lines += ["    esac", "    prev=\"\"", '    case "${cmdpath:+$cmdpath }$w" in']
    if paths:
        lines.append(f"      {'|'.join(shlex.quote(p) for p in paths)}) cmdpath=\"${{cmdpath:+$cmdpath }}$w\" ;;")
    lines += ["    esac", "  done", '  case "$cmdpath|$prev" in']
    for p, lvl in table.items():
        for opt, words in sorted(lvl.valued.items()):  # a value nobody can guess (a port, a URL): no candidates
            lines.append(f"    {shlex.quote(f'{p}|{opt}')}) echo {shlex.quote(' '.join(words))}; return ;;")
    lines += ["  esac", '  case "$cmdpath" in']
    for p, lvl in table.items():
        cands = " ".join([*lvl.subcommands, *lvl.positional_choices, *lvl.options,
                          *(["@files"] if lvl.positional_files else [])])
        lines.append(f"    {shlex.quote(p)}) echo {shlex.quote(cands)} ;;")
    lines += ["  esac", "}"]
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    from bot import __version__

    body = _words_function(levels(parser))
    if shell == "bash":
        return (
            f"# bash completion for triage (gpu-triage {__version__}): eval \"$(triage completion bash)\"\n"
            + body
            + "_triage() {\n"
            "  local cur=${COMP_WORDS[COMP_CWORD]} w files=0 words=()\n"
            "  for w in $(_triage_words \"${COMP_WORDS[@]:0:COMP_CWORD}\"); do\n"
            "    if [[ $w == @files ]]; then files=1; else words+=(\"$w\"); fi\n"
            "  done\n"
            "  if [[ $cur != -* ]]; then local keep=(); for w in \"${words[@]}\"; do [[ $w == -* ]] || keep+=(\"$w\"); done\n"
            "    words=(\"${keep[@]}\"); fi\n"
            "  COMPREPLY=($(compgen -W \"${words[*]}\" -- \"$cur\"))\n"
            "  if (( files )) && [[ $cur != -* ]]; then COMPREPLY+=($(compgen -f -- \"$cur\")); fi\n"
            "}\n"
            "complete -o filenames -o bashdefault -F _triage triage\n"
        )
    return (
        "#compdef triage\n"
        f"# zsh completion for triage (gpu-triage {__version__}): eval \"$(triage completion zsh)\" after compinit,\n"
        "# or save as _triage in a directory of $fpath\n"
        + body
        + "_triage() {\n"
        "  local -a cands opts\n"
        "  local w files=0\n"
        "  for w in $(_triage_words \"${(@)words[1,CURRENT-1]}\"); do\n"
        "    if [[ $w == @files ]]; then files=1; elif [[ $w == -* ]]; then opts+=($w); else cands+=($w); fi\n"
        "  done\n"
        "  if [[ $PREFIX == -* ]]; then compadd -- $opts; return; fi\n"
        "  (( ${#cands} )) && compadd -- $cands\n"
        "  (( files )) && _files\n"
        "  return 0\n"
        "}\n"
        "if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then _triage \"$@\"; else compdef _triage triage; fi\n"
    )


def run(args: argparse.Namespace) -> int:
    from bot.cli.main import build_parser

    print(script(args.shell, build_parser()), end="")
    return 0
