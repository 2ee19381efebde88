"""Every `tripod` command line in the README's bash blocks still means something to the binary: its
subcommands exist, each option it gives is one the (sub)command's --help lists, and each `--set` key
is a config key. The README is where a new user starts; an option renamed in the code and not in
the README is a command that fails on first contact."""
import functools
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tripod_cli import TRIPOD, require_tripod

SOURCE = Path(os.environ.get("TRIPOD_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def readme_command_lines():
    """The lines of the README's bash blocks that run tripod, continuation lines joined."""
    text = (SOURCE / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if tripod_invocations(line):
                lines.append(line.strip())
    return lines


def shell_commands(line):
    """The word lists of one shell line's commands (split at `&&`, `;` and `|`; comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&;|")
    lexer.whitespace_split = True
    commands = [[]]
    for token in lexer:
        if set(token) <= set("&;|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return commands


def tripod_invocations(line):
    """The argument lists given to tripod in one shell line (after `&&`, `;` or `|`, behind mpirun,
    srun, environment settings, and `tripod launch ... --`)."""
    found = []
    for words in shell_commands(line):
        while True:
            starts = [i for i, w in enumerate(words) if w == "tripod" or w.endswith("/tripod")]
            if not starts:
                break
            words = words[starts[0] + 1:]
            # `tripod launch [options] -- COMMAND`: the launcher's own words, then the command's
            own = words[:words.index("--")] if "--" in words else words
            found.append(own)
            words = words[len(own):]
    return found


@functools.lru_cache(maxsize=None)
def help_text(path):
    require_tripod()
    result = subprocess.run([str(TRIPOD), *path, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"tripod {' '.join(path)} --help: {result.stderr}"
    return result.stdout


def subcommands(help_output):
    names, listing = set(), False
    for line in help_output.splitlines():
        if line.startswith("Subcommands:"):
            listing = True
        elif listing and re.match(r"  \S", line):
            names.add(line.split()[0])
    return names


def options(help_output):
    """Every spelling of every option the help lists ("-c,--config TEXT=tiny" gives -c and --config)."""
    names = set()
    for line in help_output.splitlines():
        match = re.match(r"\s+(-[^\s]+)", line)
        if match:
            names.update(n for n in match.group(1).split(",") if n.startswith("-"))
    return names


def check_invocation(words):
    """Problems with one argument list: unknown subcommands or options, and the --set keys given."""
    path, problems, keys = [], [], []
    i = 0
    while i < len(words) and words[i] in subcommands(help_text(tuple(path))):
        path.append(words[i])
        i += 1
    known = set()
    for depth in range(len(path) + 1):  # a parent's options stand before its subcommand's
        known |= options(help_text(tuple(path[:depth])))
    rest = words[i:]
    leaf = help_text(tuple(path))
    usage = next(line for line in leaf.splitlines() if line.startswith("Usage:"))
    takes_words = "Positionals:" in leaf
    if usage.endswith(" SUBCOMMAND") or (rest and not rest[0].startswith("-") and not takes_words):
        problems.append(f"`tripod {' '.join(path)}` has no subcommand {rest[0] if rest else '(none given)'}")
    for j, word in enumerate(rest):
        if re.match(r"-[A-Za-z-]", word):
            name = word.split("=")[0]
            passed_through = name.startswith("--benchmark_") and "Google Benchmark's flags pass through" in leaf
            if name not in known and not passed_through:
                problems.append(f"`tripod {' '.join(path)}` has no option {name}")
            if name == "--set" and j + 1 < len(rest):
                keys.append(rest[j + 1])
    return path, problems, keys


def readme_inline_commands():
    """`tripod ...` in the README's prose (code spans outside the blocks): many only name a command
    (`tripod ckpt`), so of these only the options are held against the binary."""
    prose = re.sub(r"```.*?```", "", (SOURCE / "README.md").read_text(), flags=re.S)
    return [span for span in re.findall(r"`(tripod [^`]+)`", prose) if "..." not in span and "…" not in span]


LINES = readme_command_lines()


def test_the_readme_has_the_commands_this_suite_reads():
    invocations = [words for line in LINES for words in tripod_invocations(line)]
    assert len(invocations) >= 80, invocations  # 23 bash blocks, about 90 tripod commands, when written
    paths = {tuple(check_invocation(words)[0]) for words in invocations}
    assert {("train",), ("bench", "comm"), ("golden", "check"), ("scale", "run"), ("launch",)} <= paths, paths


@pytest.mark.parametrize("line", LINES)
def test_a_readme_command_names_what_the_binary_has(line, tmp_path):
    for words in tripod_invocations(line):
        path, problems, keys = check_invocation(words)
        assert not problems, f"README: {line}\n" + "\n".join(problems)
        if keys:
            # Unknown keys are refused before the data is opened: a missing data folder is the error
            # every known key leads to.
            sets = [arg for key in keys for arg in ("--set", key)]
            config = words[words.index("--config") + 1] if "--config" in words else "tiny"  # a preset's name
            result = subprocess.run([str(TRIPOD), "train", "--config", config, *sets, "--set",
                                     f"data.dir={tmp_path / 'none'}"], capture_output=True, text=True, timeout=60)
            assert "data directory" in result.stderr and "does not exist" in result.stderr, \
                f"README: {line}\n{result.stderr}"


def test_the_options_a_readme_sentence_gives_a_command_are_the_binarys():
    spans = readme_inline_commands()
    assert len(spans) >= 80, spans  # about a hundred, when written
    problems = [f"README: `{span}`: {problem}" for span in spans for words in tripod_invocations(span)
                for problem in check_invocation(words)[1] if " has no option " in problem]
    assert not problems, "\n".join(problems)


def test_the_checker_finds_an_option_or_key_the_binary_does_not_have():
    assert check_invocation(["train", "--config", "tiny", "--no-such-option"])[1] == \
        ["`tripod train` has no option --no-such-option"]
    assert check_invocation(["bench", "comm", "-b", "8", "--quick"])[1] == []  # bench's own, before comm
    assert check_invocation(["bench", "comm", "-z", "8"])[1] == ["`tripod bench comm` has no option -z"]
    assert check_invocation(["ckpt", "inf", "ck"])[1] == ["`tripod ckpt` has no subcommand inf"]
    assert check_invocation(["bench", "trian"])[1] == ["`tripod bench` has no subcommand trian"]
    assert check_invocation(["scale", "run", "quick", "--out", "x"])[1] == []
    assert check_invocation(["bench", "kernels", "--benchmark_filter=attention"])[1] == []  # Google Benchmark's
    assert check_invocation(["bench", "train", "--benchmark_filter=x"])[1] == ["`tripod bench train` has no option "
                                                                               "--benchmark_filter"]
    assert tripod_invocations("mpirun -np 2 tripod launch --max-restarts 3 -- srun tripod train --tp 2") == \
        [["launch", "--max-restarts", "3"], ["train", "--tp", "2"]]
