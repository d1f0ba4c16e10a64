#!/usr/bin/env python3
"""Which C++ sources clang-tidy must check (tools/tidy.sh), from a configured and built tree.

  tidy-select.py BUILD [--changed REV] [--cache DIR]
      prints the sources (paths relative to the repository), one a line: every .cpp under
      modules/ and apps/ that git tracks, less those that need no check:
        --changed REV  only those changed since REV, themselves or through any file of the
                       repository they include (the compiler's depfiles in BUILD say which), or
                       all of them when .clang-tidy changed;
        --cache DIR    not those checked clean before with exactly the same inputs (a key file
                       in DIR; see `key`).
  tidy-select.py BUILD --record DIR FILE...
      records FILEs (checked clean just now) in the cache DIR.

A source's key is a hash of the clang-tidy version, .clang-tidy, its compile command and the
contents of every file its depfile lists (its headers, system headers included): any change
that could change a finding changes it.
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys


def repo_root():
    return subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True,
                          capture_output=True, text=True).stdout.strip()


def sources(root):
    out = subprocess.run(["git", "ls-files", "modules/*.cpp", "apps/*.cpp"], cwd=root,
                         check=True, capture_output=True, text=True).stdout.split()
    return sorted(out)


def commands(build):
    """source (absolute) -> (compile command, depfile path)."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    out = {}
    for e in entries:
        args = shlex.split(e["command"])
        obj = None
        for i, a in enumerate(args):
            if a == "-o" and i + 1 < len(args):
                obj = args[i + 1]
        src = os.path.normpath(os.path.join(e["directory"], e["file"]))
        dep = os.path.join(e["directory"], obj + ".d") if obj else None
        out[src] = (e["command"], dep, e["directory"])
    return out


def depfile_inputs(dep, directory):
    """The files a make-style depfile lists (its target excluded), absolute: relative entries
    are relative to the compiler's working directory."""
    try:
        with open(dep) as f:
            text = f.read()
    except OSError:
        return None
    text = text.replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    return [os.path.normpath(os.path.join(directory, p)) for p in rest.split()]


_hashes = {}


def file_hash(path):
    if path not in _hashes:
        try:
            with open(path, "rb") as f:
                _hashes[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            _hashes[path] = "missing"
    return _hashes[path]


def tidy_version():
    try:
        return subprocess.run(["clang-tidy", "--version"], capture_output=True,
                              text=True).stdout
    except OSError:
        return "none"


def key(root, cmd, inputs, version, relative=True):
    """The cache key of a check: the tool, the configuration, the command and every input's
    contents. Paths under the clone are taken relative to it, so that another clone of the same
    commit (CI clones afresh, maybe elsewhere) finds the files checked before; relative=False
    gives the key before 2026-11-28 (absolute paths), which an earlier CI run in the same
    directory left."""
    prefix = root.rstrip("/") + "/"

    def rel(text):
        return text.replace(prefix, "<repo>/") if relative else text

    h = hashlib.sha256()
    h.update(version.encode())
    h.update(file_hash(os.path.join(root, ".clang-tidy")).encode())
    h.update(rel(cmd).encode())
    for p in sorted(set(inputs)):
        h.update((p[len(prefix):] if relative and p.startswith(prefix) else p).encode())
        h.update(file_hash(p).encode())
    return h.hexdigest()


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(argv[1])
    root = repo_root()
    rest = argv[2:]
    changed_rev = cache = None
    record = None
    i = 0
    while i < len(rest):
        if rest[i] == "--changed" and i + 1 < len(rest):
            changed_rev = rest[i + 1]
            i += 2
        elif rest[i] == "--cache" and i + 1 < len(rest):
            cache = rest[i + 1]
            i += 2
        elif rest[i] == "--record" and i + 1 < len(rest):
            record = rest[i + 1]
            files = rest[i + 2:]
            break
        else:
            print(f"tidy-select: unknown argument {rest[i]}", file=sys.stderr)
            return 2
    cmds = commands(build)
    version = tidy_version()

    def inputs_of(src_abs):
        cmd, dep, directory = cmds.get(src_abs, (None, None, None))
        if cmd is None:
            return None, None
        return cmd, depfile_inputs(dep, directory) if dep else None

    if record is not None:
        os.makedirs(record, exist_ok=True)
        for rel in files:
            cmd, inputs = inputs_of(os.path.join(root, rel))
            if cmd is not None and inputs is not None:
                with open(os.path.join(record, key(root, cmd, inputs, version)), "w") as f:
                    f.write(rel + "\n")
        return 0

    selected = sources(root)
    if changed_rev is not None:
        diff = subprocess.run(["git", "diff", "--name-only", changed_rev], cwd=root,
                              capture_output=True, text=True)
        if diff.returncode != 0:
            print(f"tidy-select: cannot diff against {changed_rev}: every source",
                  file=sys.stderr)
        else:
            changed = {os.path.normpath(os.path.join(root, p)) for p in diff.stdout.split()}
            if os.path.join(root, ".clang-tidy") not in changed:
                keep = []
                for rel in selected:
                    src = os.path.join(root, rel)
                    _, inputs = inputs_of(src)
                    if inputs is None or src in changed or any(p in changed for p in inputs):
                        keep.append(rel)
                selected = keep
    if cache is not None and os.path.isdir(cache):
        keep = []
        for rel in selected:
            cmd, inputs = inputs_of(os.path.join(root, rel))
            if cmd is None or inputs is None or not any(
                    os.path.exists(os.path.join(cache, key(root, cmd, inputs, version, r)))
                    for r in (True, False)):
                keep.append(rel)
        selected = keep
    for rel in selected:
        print(rel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
