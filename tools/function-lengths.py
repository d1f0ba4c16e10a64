#!/usr/bin/env python3
"""The longest functions of rsched's sources (issue 52): one line each, longest first.

    tools/function-lengths.py [--top N] [--check] [DIR ...]

Reads every .cpp, .hpp, .c and .h below DIR (default: modules apps), without comments, string,
character and raw-string literals, and measures each function definition at namespace or class
level from the line of its signature's name to its closing brace (lambdas and local classes
count in the function that holds them). The limits are the issue's: 120 lines in modules/query,
150 anywhere else. --check exits 1 when a function is over its limit (what CI will run once the
limits hold); without it the script only reports, and marks the ones over with '!'.

A reader of text, not a compiler: macros that hide braces or a function-try-block are measured as
they read. Good enough to rank and to bound; the numbers match an editor's line count.
"""
import argparse
import os
import re
import sys

LIMIT_QUERY = 120
LIMIT_OTHER = 150
EXTENSIONS = (".cpp", ".hpp", ".c", ".h")


def strip_code(text):
    """`text` with comments and literals blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('"', i + 1) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
            out.append(c)  # a digit separator: 1'000'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def functions(path):
    """(name, first line, length) of each function defined at namespace or class level."""
    with open(path, encoding="utf-8", errors="replace") as f:
        code = strip_code(f.read())
    found = []
    stack = []  # per open brace: "container", "function" or "other"
    segment_start = 0  # where the text before the next brace begins
    last_fn = None  # the function a brace just closed in this declaration (a member initializer)
    line = 1
    open_fns = []  # (name, line) of the functions open
    for i, c in enumerate(code):
        at_top = all(k == "container" for k in stack)
        if c == "\n":
            line += 1
        elif c == ";" and at_top:
            segment_start = i + 1
            last_fn = None
        elif c == "{":
            # (preprocessor lines blanked: `#if defined(X)` is no signature)
            seg = re.sub(r"(?m)^[ \t]*#.*$", "", code[segment_start:i])
            if not at_top:
                stack.append("other")
            elif re.search(r'extern\s*""', seg):
                stack.append("container")
            elif "(" in seg and not seg.rstrip().endswith("="):
                names = re.findall(r"(operator\s*[^\s(]+|[~\w]+(?:::[~\w]+)*)\s*\(", seg)
                name = names[0] if names else "?"
                at = seg.find(name) if names else 0
                stack.append("function")
                open_fns.append((name, line - seg[at:].count("\n")))
            elif last_fn is not None and seg.strip() == "":
                stack.append("function")  # the body after `: a_{b}`
                open_fns.append(last_fn)
            else:
                stack.append("container" if CONTAINER.search(seg) else "other")
            segment_start = i + 1
        elif c == "}":
            if not stack:
                continue
            kind = stack.pop()
            if kind == "function" and all(k == "container" for k in stack):
                name, first = open_fns.pop()
                last_fn = (name, first)
                found.append((name, first, line - first + 1))
            elif all(k == "container" for k in stack):
                last_fn = None
            segment_start = i + 1
    # A constructor's body after a braced member initializer is one function with its list.
    merged = {}
    for name, first, length in found:
        merged[(name, first)] = max(merged.get((name, first), 0), length)
    return [(n, f, l) for (n, f), l in merged.items()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("dirs", nargs="*", default=["modules", "apps"])
    a = ap.parse_args()
    rows = []
    for d in a.dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if f.endswith(EXTENSIONS) and f != "vmlinux.h":
                    p = os.path.join(root, f)
                    limit = LIMIT_QUERY if p.startswith("modules/query/") else LIMIT_OTHER
                    rows += [(length, p, first, name, limit) for name, first, length in functions(p)]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    over = [r for r in rows if r[0] > r[4]]
    for length, p, first, name, limit in rows[: a.top]:
        print(f"{length:5d}{'!' if length > limit else ' '} {p}:{first} {name}")
    print(f"{len(rows)} functions; {len(over)} over the limit (120 lines in modules/query, 150 elsewhere)")
    return 1 if a.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
