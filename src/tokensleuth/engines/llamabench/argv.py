"""llama-bench's argv for planned workloads: a workload's flags, several joined in one process,
repetitions per process. The planner names workloads; these are the flags that run them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tokensleuth.core.cliargs import flag_values, int_list
from tokensleuth.core.workloads import parse, parse_workload

# the flags that name tests: tokensleuth sets them from the workloads (an arm may not set them too)
WORKLOAD_FLAGS = frozenset({"-p", "--n-prompt", "-n", "--n-gen", "-d", "--n-depth", "-pg"})
REPETITION_FLAGS = ("-r", "--repetitions")
THREAD_FLAGS = ("-t", "--threads")
DEFAULT_REPETITIONS = 5  # llama-bench's own -r


def workload_flags(name: str) -> list[str]:
    """llama-bench flags that run exactly this one workload."""
    n_prompt, n_gen, n_depth = parse_workload(name)
    if n_prompt and n_gen:
        flags = ["-p", "0", "-n", "0", "-pg", f"{n_prompt},{n_gen}"]
    else:
        flags = ["-p", str(n_prompt), "-n", str(n_gen)]
    return flags + ["-d", str(n_depth)]


def planned_argv(name: str) -> list[str]:
    """The flags a trial of this one workload is planned with (none for a concurrent workload,
    which llama-bench refuses before any trial)."""
    w = parse(name)
    return [] if w.concurrency > 1 else workload_flags(w.name)


def joined_flags(names: Sequence[str]) -> list[str] | None:
    """llama-bench flags that run exactly these workloads in one process, each as its own test
    (prompts, generations and at most one prompt+generation, all at one depth), or None when
    one process cannot run them: a concurrent workload, two depths, two pp+tg or repeats.

    One process per model instead of one per workload: the model is loaded once for all of a
    pair's tests (at 30B the load is ~7 s of a 7.6 s tg32 trial)."""
    ws = [parse(n) for n in names]
    if len(ws) < 2 or len({w.name for w in ws}) != len(ws) or any(w.concurrency > 1 for w in ws):
        return None
    if len({w.n_depth for w in ws}) != 1:
        return None
    pg = [w for w in ws if w.n_prompt and w.n_gen]
    pp = [str(w.n_prompt) for w in ws if w.n_prompt and not w.n_gen]
    tg = [str(w.n_gen) for w in ws if w.n_gen and not w.n_prompt]
    if len(pg) > 1 or len(pp) + len(tg) + len(pg) != len(ws):
        return None
    flags = ["-p", ",".join(pp) or "0", "-n", ",".join(tg) or "0"]
    if pg:
        flags += ["-pg", f"{pg[0].n_prompt},{pg[0].n_gen}"]
    return flags + ["-d", str(ws[0].n_depth)]


def argv_for(workloads: Sequence[str], repetitions: int | None = None) -> list[str] | None:
    """The trial argv for these workloads (none: llama-bench's own tests; several: one process,
    None where it cannot run them together), then ``-r repetitions`` when given."""
    if not workloads:
        argv: list[str] | None = []
    elif len(workloads) == 1:
        argv = planned_argv(workloads[0])
    else:
        argv = joined_flags(workloads)
    if argv is None:
        return None
    return argv + (["-r", str(repetitions)] if repetitions is not None else [])


# flags whose values tokensleuth reads (the memory prediction), and the values llama-bench takes
# for them (each value of a list)
_INT_FLAGS: dict[tuple[str, ...], int] = {("-ngl", "--n-gpu-layers"): -1, ("-ncmoe", "--n-cpu-moe"): 0, ("-b", "--batch-size"): 1,
              ("-ub", "--ubatch-size"): 1, ("-t", "--threads"): 1, ("-p", "--n-prompt"): 0,
              ("-n", "--n-gen"): 0, ("-d", "--n-depth"): 0}
_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
_CHOICES: dict[tuple[str, ...], tuple[str, ...]] = {("-ctk", "--cache-type-k"): _CACHE_TYPES, ("-ctv", "--cache-type-v"): _CACHE_TYPES,
            ("-mmp", "--mmap"): ("0", "1"), ("-nkvo", "--no-kv-offload"): ("0", "1"),
            ("-fa", "--flash-attn"): ("0", "1", "on", "off", "auto"), ("--repack",): ("0", "1")}


def check_flag_values(flags: Sequence[str]) -> None:
    """Refuse a value tokensleuth or llama-bench reads that llama-bench would not take (``-ub 0``,
    ``-ngl abc``, ``-ctk nope``, ``-p x``, ``-d -1``, ``-pg 512``, ``-p 0 -n 0``): a prediction from it would
    say "fits" for a run that cannot start, and a study would find out only after its build. Every
    check of the wing's values is here, run before any build (Engine.check and Engine.guard)."""
    from tokensleuth.core.errors import UserError, show

    for names, least in _INT_FLAGS.items():
        for value in flag_values(flags, *names):
            for v in value.split(","):
                if not re.fullmatch(r"-?\d{1,9}", v.strip()) or int(v) < least:
                    raise UserError(f"llama-bench flag {names[0]} {show(value)}: give whole numbers of at least "
                                    f"{least} (a list is comma-separated)")
    for value in flag_values(flags, "-pg"):
        for pair in value.split(";") if ";" in value else [value]:
            parts = pair.split(",")
            if len(parts) != 2 or not all(re.fullmatch(r"\d{1,9}", x.strip()) for x in parts):
                raise UserError(f"llama-bench flag -pg {show(value)}: give a prompt and a generation length, "
                                "e.g. -pg 512,128")
    prompts, gens = flag_values(flags, "-p", "--n-prompt"), flag_values(flags, "-n", "--n-gen")
    if (prompts and gens and not flag_values(flags, "-pg")
            and all(int(v) == 0 for x in (*prompts, *gens) for v in x.split(","))):
        raise UserError("llama-bench flags -p 0 -n 0 leave it no test to run — give a prompt or a generation "
                        "length, or a workload with -w (e.g. -w tg32)")
    for names, choices in _CHOICES.items():
        for value in flag_values(flags, *names):
            bad = [v for v in value.split(",") if v.strip().lower() not in choices]
            if bad:
                raise UserError(f"llama-bench flag {names[0]} {show(value)}: {show(bad[0])} is not one of "
                                f"{', '.join(choices)}")


def check_repetitions(flags: Sequence[str]) -> None:
    """Refuse a ``-r`` that is not a whole number of at least 1 (tokensleuth reads it to plan
    trials; llama-bench would end on it with exit 1 after the build)."""
    from tokensleuth.core.errors import UserError, show

    for i, f in enumerate(flags):
        name, eq, value = f.partition("=")
        if name not in REPETITION_FLAGS:
            continue
        if not eq:
            value = flags[i + 1] if i + 1 < len(flags) else ""
        if not value.isdigit() or int(value) < 1 or len(value) > 6:
            raise UserError(f"llama-bench flag {name} {show(value)}: repetitions are a whole number of at least 1 "
                            "— e.g. -r 5")


def sets_repetitions(flags: Sequence[str]) -> bool:
    """Whether the flags name the repetitions (``-r``) at all."""
    return any(f in REPETITION_FLAGS for f in flags)


def repetitions(flags: Sequence[str]) -> int | None:
    """The ``-r N`` of these flags (the last counts), None where they give none."""
    reps = None
    for i, f in enumerate(flags[:-1]):
        if f in REPETITION_FLAGS and flags[i + 1].isdigit():
            reps = int(flags[i + 1])
    return reps


def flag_tests(flags: Sequence[str]) -> list[tuple[int, int, int]]:
    """The largest (prompt, generated, depth) tests these flags add to a run: every ``-p`` and
    ``-n`` value is a test of its own at each ``-d``, and a ``-pg pp,tg`` runs both in one context
    (what the memory guard sizes the context by)."""
    def values(*names: str) -> list[str]:
        return flag_values(flags, *names)

    ints = int_list
    p_extra = [v for x in values("-p", "--n-prompt") for v in ints(x)]
    n_extra = [v for x in values("-n", "--n-gen") for v in ints(x)]
    d_extra = [v for x in values("-d", "--n-depth") for v in ints(x)]
    depth = max(d_extra or [0])
    out = []
    if p_extra or n_extra or d_extra:
        out.append((max(p_extra + n_extra or [0]), 0, depth))
    for x in values("-pg"):
        pg = ints(x)
        if len(pg) == 2:
            out.append((pg[0], pg[1], depth))
    return out


def with_threads(flags: Sequence[str], threads: int) -> list[str]:
    """``flags`` with llama-bench's thread count set to ``threads`` (``-t``, replaced where given)."""
    out: list[str] = []
    skip = False
    for i, f in enumerate(flags):
        if skip:
            skip = False
            continue
        if f in THREAD_FLAGS and i + 1 < len(flags):
            skip = True
            continue
        if f.startswith(f"{THREAD_FLAGS[1]}="):
            continue
        out.append(f)
    return [*out, THREAD_FLAGS[0], str(threads)]


def sets_threads(flags: Sequence[str]) -> bool:
    """Whether the flags set the thread count (``-t``, ``--threads``) themselves."""
    return any(f in THREAD_FLAGS or f.startswith(f"{THREAD_FLAGS[1]}=") for f in flags)


# -- an arm's argv: the common flags and its own, one value per option -----------------------
# llama-bench's options, from its parse_cmd_params (tools/llama-bench/llama-bench.cpp). Each row:
# the spellings of one option (short and long name one setting), then how its value reads:
# "list" (one test per value, ',' between values), "range" (a list whose numbers may also be
# first-last[+|*step]), "one" (a single value; a later one wins), "none" (it takes no value).
# -pg's ',' joins its pair.
OPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("-h", "--help"), "none"), (("--version",), "none"), (("--list-devices",), "none"),
    (("-v", "--verbose"), "none"), (("--progress",), "none"), (("--no-warmup",), "none"), (("--offline",), "none"),
    (("-m", "--model"), "list"), (("-hf", "-hfr", "--hf-repo"), "list"), (("-hff", "--hf-file"), "list"),
    (("-hft", "--hf-token"), "one"), (("-p", "--n-prompt"), "range"), (("-n", "--n-gen"), "range"),
    (("-pg",), "pair"), (("-d", "--n-depth"), "range"), (("-b", "--batch-size"), "range"),
    (("-ub", "--ubatch-size"), "range"), (("-ctk", "--cache-type-k"), "list"), (("-ctv", "--cache-type-v"), "list"),
    (("-dev", "--device"), "list"), (THREAD_FLAGS, "range"), (("-C", "--cpu-mask"), "list"),
    (("--cpu-strict",), "list"), (("--poll",), "range"), (("-ngl", "--n-gpu-layers"), "range"),
    (("-ncmoe", "--n-cpu-moe"), "range"), (("-rpc", "--rpc"), "one"), (("-sm", "--split-mode"), "list"),
    (("-lm", "--load-mode"), "list"), (("-lzm", "--lazy-mode"), "list"), (("-mg", "--main-gpu"), "range"),
    (("-nkvo", "--no-kv-offload"), "list"), (("--numa",), "one"), (("-fa", "--flash-attn"), "list"),
    (("-mmp", "--mmap"), "list"), (("-dio", "--direct-io"), "list"), (("-embd", "--embeddings"), "list"),
    (("-nopo", "--no-op-offload"), "list"), (("--no-host",), "list"), (("--repack",), "list"),
    (("-ts", "--tensor-split"), "list"), (("-ot", "--override-tensor"), "list"), (REPETITION_FLAGS, "one"),
    (("--prio",), "one"), (("--delay",), "one"), (("-o", "--output"), "one"), (("-oe", "--output-err"), "one"),
    (("-fitt", "--fit-target"), "list"), (("-fitc", "--fit-ctx"), "list"),
)
_CANONICAL = {s: names[0] for names, _ in OPTIONS for s in names}
_VALUES = {names[0]: how for names, how in OPTIONS}
_RANGE = re.compile(r"-?\d+-\d+")  # first-last, a step after it or not


def option_name(word: str) -> str | None:
    """The option a word names, by its first spelling (-t for --threads; llama-bench reads a
    long option's '_' as '-'), None for a value (a negative number too)."""
    if not word.startswith("-") or re.fullmatch(r"-\d[\d.,]*", word):
        return None
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        name = name.replace("_", "-")
    return _CANONICAL.get(name, name)


def options(flags: Sequence[str]) -> list[tuple[str | None, tuple[str, ...]]]:
    """The flags as options, in order: (the option's name, its words: the option and its
    value). A value no option takes stands alone, under None."""
    out: list[tuple[str | None, tuple[str, ...]]] = []
    i = 0
    while i < len(flags):
        word, name = flags[i], option_name(flags[i])
        how = _VALUES.get(name or "")
        takes = name is not None and "=" not in word and how != "none" and i + 1 < len(flags) and (
            how is not None or option_name(flags[i + 1]) is None)  # (an option llama-bench has not: a value if one follows)
        out.append((name, tuple(flags[i:i + 2]) if takes else (word,)))
        i += 2 if takes else 1
    return out


def join_flags(common: Sequence[str], own: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """An arm's argv: the common flags, then its own. An option the arm gives itself is passed
    once, with the arm's value: the common one is left out (-t and --threads are one option).
    Also (the arm's words, the common words) for each option the arm overrides."""
    mine = options(own)
    given = {name for name, _ in mine if name is not None}
    kept: list[str] = []
    dropped: dict[str, list[str]] = {}
    for name, words in options(common):
        if name in given:
            dropped.setdefault(name, []).extend(words)
        else:
            kept.extend(words)
    overrides = [(" ".join(w for n, words in mine if n == name for w in words), " ".join(common_words))
                 for name, common_words in dropped.items()]
    return [*kept, *own], overrides


def check_one_test(flags: Sequence[str]) -> None:
    """Refuse an option whose value is a list (``-t 1,2``, ``-p 512-1024``) or that is given twice
    where each value is a test of its own: llama-bench would run one test per value, and a trial
    is one test. Each value is its own arm (UserError, one line)."""
    from tokensleuth.core.errors import UserError, show

    seen: dict[str, str] = {}
    for name, words in options(flags):
        how = _VALUES.get(name or "")
        if name is None or how in (None, "one", "none"):
            continue
        value = words[0].split("=", 1)[1] if "=" in words[0] else (words[1] if len(words) > 1 else "")
        shown = f"{words[0].split('=', 1)[0]} {show(value)}"
        listed = how != "pair" and ("," in value or (how == "range" and _RANGE.match(value) is not None))
        if listed:
            raise UserError(f"llama-bench flag {shown} sweeps several settings (one test per value) — "
                            "give each value its own arm")
        if name in seen:
            raise UserError(f"llama-bench flag {shown} is given twice ({show(seen[name])} too): llama-bench would "
                            "run one test per value — give it once, and each value its own arm")
        seen[name] = value
