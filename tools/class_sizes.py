#!/usr/bin/python3
"""Member functions and lines of each class, largest first (issue 25's measure).

A class's lines are its body in the header plus the bodies of its out-of-line
members (`Class::name(...) {...}`) in the .cpp files beside it. Member
functions are the declarations at class level (constructors and operators
included, nested types' members not). A heuristic, not a parser: good enough
to rank classes and to compare before/after.

    tools/class_sizes.py [--top N] [DIR ...]   (default: app core engine net ui)
"""
import pathlib
import re
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def matching(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def class_level_statements(body):
    """The body's statements at depth 0, with nested braces collapsed."""
    out, depth, current = [], 0, []
    for ch in body:
        if ch == "{":
            if depth == 0:
                out.append("".join(current) + "{")
                current = []
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0:
            if ch == ";":
                out.append("".join(current))
                current = []
            else:
                current.append(ch)
    return out


def member_functions(body):
    count = 0
    for statement in class_level_statements(body):
        s = re.sub(r"\b(public|private|protected|signals|slots|Q_SLOTS|Q_SIGNALS)\s*:", "", statement).strip()
        if not s or s.startswith(("using ", "friend ", "static_assert", "enum ", "struct ", "class ", "union ", "Q_")):
            continue
        head = re.split(r"=(?!=)|\{", s, maxsplit=1)[0]
        if "(" in head and not re.match(r"^(typedef|return)\b", head):
            count += 1
    return count


def main():
    args = sys.argv[1:]
    top = 10
    if args[:1] == ["--top"]:
        top, args = int(args[1]), args[2:]
    dirs = args or ["app", "core", "engine", "net", "ui"]
    classes = {}
    sources = []
    for d in dirs:
        for path in sorted(pathlib.Path(d).rglob("*")):
            if path.suffix in (".h", ".cpp"):
                sources.append(path)
    for path in sources:
        if path.suffix != ".h":
            continue
        text = strip_comments(path.read_text(errors="replace"))
        for m in re.finditer(r"^(?:class|struct)\s+(?:\w+\s+)?(\w+)(?:\s+final)?\s*(?::[^{;]*)?\{", text, re.M):
            end = matching(text, m.end() - 1)
            body = text[m.end():end]
            name = m.group(1)
            classes[name] = {"file": str(path), "functions": member_functions(body),
                             "lines": body.count("\n") + 1}
    for path in sources:
        if path.suffix != ".cpp":
            continue
        text = strip_comments(path.read_text(errors="replace"))
        for m in re.finditer(r"^[^\n;{}]*?\b(\w+)::~?\w+\s*\([^;{]*?\)[^;{]*\{", text, re.M):
            name = m.group(1)
            if name not in classes:
                continue
            end = matching(text, m.end() - 1)
            classes[name]["lines"] += text[m.start():end].count("\n") + 1
    ranked = sorted(classes.items(), key=lambda kv: kv[1]["lines"], reverse=True)[:top]
    print(f"| class | file | member functions | lines |")
    print(f"| --- | --- | ---: | ---: |")
    for name, c in ranked:
        print(f"| {name} | {c['file']} | {c['functions']} | {c['lines']} |")


if __name__ == "__main__":
    main()
