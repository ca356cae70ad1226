"""Two contract types of our own for import-linter (pyproject.toml: [tool.importlinter]
contract_types).

`files`: modules that are in no package, loaded by path (each notebook's hidden tests, in
solutions/<id>/hidden_tests.py, imported as `autograder.exercises.<topic>`), import of the
course's packages only what `allowed_modules` names (and what lies under it), lazy imports
included. grimp reads packages only, so without this their imports would be checked by nothing.

 (pyproject.toml: [tool.importlinter] contract_types):
no module of `packages` reaches itself again through the imports, lazy ones (inside a function)
included, a package's __init__ counted as a module of its own.

import-linter's own acyclic_siblings contract looks for cycles between the children of each
package; a cycle through a package's __init__ (the package imports one of its modules, which
imports the package back) is none of those. This one takes the module graph as grimp reads it
(every import statement, wherever it stands) and fails on each strongly connected group of two
or more modules, naming one shortest cycle of it with the import lines.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

ROOT = Path(__file__).resolve().parents[1]


class FilesContract(Contract):
    files = fields.ListField(subfield=fields.StringField())  # globs under the course root
    packages = fields.ListField(subfield=fields.StringField())  # whose imports are checked
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        def inside(name, prefixes):
            return any(name == p or name.startswith(f"{p}.") for p in prefixes)

        found, broken = [], []
        for pattern in self.files:
            found += sorted(ROOT.glob(str(pattern)))
        for path in found:
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                broken += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                           for name in names if inside(name, self.packages)
                           and not inside(name, self.allowed_modules)]
        return ContractCheck(kept=bool(found) and not broken, warnings=[],
                             metadata={"broken": broken, "none": not found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        if check.metadata["none"]:
            output.print_error(f"No file matches {', '.join(map(str, self.files))}")
        for line in check.metadata["broken"]:
            output.print_error(f"- {line}", bold=False)
        output.new_line()


class AcyclicContract(Contract):
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        inside = {m for p in self.packages for m in graph.find_descendants(p) | {p}}
        edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside)
                 for m in sorted(inside)}
        cycles = []
        for group in _strongly_connected(edges):
            cycle = _shortest_cycle(edges, group)
            lines = []
            for importer, imported in zip(cycle, cycle[1:], strict=False):
                details = graph.get_import_details(importer=importer, imported=imported)
                where = ", ".join(f"l.{d['line_number']}" for d in details)
                lines.append(f"{importer} -> {imported} ({where})")
            cycles.append({"modules": sorted(group), "cycle": lines})
        return ContractCheck(kept=not cycles, warnings=[], metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for found in check.metadata["cycles"]:
            output.print_error(f"Import cycle among {', '.join(found['modules'])}:")
            output.new_line()
            for line in found["cycle"]:
                output.print_error(f"- {line}", bold=False)
            output.new_line()


def _strongly_connected(edges: dict[str, list[str]]) -> list[set[str]]:
    """Tarjan's groups of two or more modules, iteratively (no recursion limit)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def _shortest_cycle(edges: dict[str, list[str]], group: set[str]) -> list[str]:
    """One shortest cycle through the group, as [a, b, ..., a]."""
    best = None
    for start in sorted(group):
        before, queue = {start: None}, deque([start])
        while queue:
            node = queue.popleft()
            if start in edges[node]:
                path = [node]
                while before[path[-1]] is not None:
                    path.append(before[path[-1]])
                cycle = [*reversed(path), start]
                if best is None or len(cycle) < len(best):
                    best = cycle
                break
            for child in edges[node]:
                if child in group and child not in before:
                    before[child] = node
                    queue.append(child)
    return best
