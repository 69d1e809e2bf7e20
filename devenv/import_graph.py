#!/usr/bin/env python3
"""The import graph of strata's modules, from the `crate::` paths of src/ (use lines and
inline paths), and its cycles. A module is a top-level room (config, dump, kafka, ...); an
edge A -> B means a file of A names `crate::B`. Cycles other than a room's own files are
printed and make the exit code 1. Python standard library only.

  devenv/import_graph.py            cycles, then every edge with the files that make it
  devenv/import_graph.py --quiet    cycles only
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")


def room(file):
    rel = file.relative_to(ROOT)
    if len(rel.parts) == 1:
        return rel.stem
    return rel.parts[0]


def graph():
    edges = defaultdict(lambda: defaultdict(set))
    for f in sorted(ROOT.rglob("*.rs")):
        a = room(f)
        if a in ("main", "lib"):
            continue
        for line in f.read_text().splitlines():
            code = line.split("//", 1)[0]
            for b in PATH.findall(code):
                if b != a:
                    edges[a][b].add(str(f.relative_to(ROOT.parent)))
    return edges


def cycles(edges):
    """Strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def main():
    edges = graph()
    found = cycles(edges)
    for c in found:
        print("cycle: " + " <-> ".join(c))
        for a in c:
            for b in c:
                if b in edges.get(a, {}):
                    print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
    if not found:
        print("no cycle between rooms")
    if "--quiet" not in sys.argv:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a]))}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
