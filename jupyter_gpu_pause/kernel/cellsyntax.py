"""What a cell's syntax says it reads and writes: the names a rebuild plan follows.

Everything here works on the cell's code after IPython's transforms (``%magic`` and ``!cmd``
are calls by then) and looks only at syntax, once per cell: nothing traces the lines a cell
runs. What that can and cannot see is listed in ``cells.py``.
"""

from __future__ import annotations

import ast
import io
import re
import symtable
import tokenize
from collections.abc import Iterator, Sequence

_MARK = re.compile(r"#\s*gp\s*:\s*no[-_ ]?rerun\b", re.IGNORECASE)
# magics that may bind or delete any name: the cell's writes are unknown
_OPAQUE_MAGICS = {"run", "store", "reset", "reset_selective", "xdel", "pylab", "load", "macro"}
# magics that leave the namespace alone, so a cell using them may run against copies
_SAFE_MAGICS = {
    "matplotlib", "load_ext", "reload_ext", "unload_ext", "config", "env", "set_env", "pip",
    "conda", "autoreload", "aimport", "precision", "pprint", "pwd", "who", "whos", "who_ls",
    "lsmagic", "writefile", "bash", "sh", "script", "html", "javascript", "js", "latex",
    "markdown", "svg", "system", "sx", "gpu_pause",
}  # fmt: skip

# ``match`` patterns that bind names: Python 3.10's (a kernel's Python may be 3.9, which has
# neither the statement nor these nodes)
_MATCH_NAMES = tuple(getattr(ast, n) for n in ("MatchAs", "MatchStar") if hasattr(ast, n))
_MATCH_REST = tuple(getattr(ast, n) for n in ("MatchMapping",) if hasattr(ast, n))


def marked_no_rerun(code: str) -> bool:
    """Whether a comment in ``code`` says ``# gp: no-rerun`` (a string that says it does not)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(code).readline)
        return any(t.type == tokenize.COMMENT and _MARK.search(t.string) for t in tokens)
    except (tokenize.TokenError, SyntaxError):
        return any(_MARK.search(line) for line in code.splitlines())


def analyse(code: str) -> dict:
    """Reads, writes and whether they are known, from already-transformed ``code``.

    Returns ``{"reads", "writes", "deletes", "star", "analysed", "blocked"}``: ``deletes`` are
    the names a top-level ``del`` leaves unbound; ``star`` lists the modules star-imported
    (their names are added once the cell has run).
    """
    out = {"reads": [], "writes": [], "deletes": [], "star": [], "analysed": False, "blocked": None}
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return out
    reads: set[str] = set()
    writes: set[str] = set()
    star: list[str] = []
    magics: list[tuple[str, str]] = []
    for stmt in tree.body:
        _module_writes(stmt, writes, star)
    try:
        _scope_reads(symtable.symtable(code, "<cell>", "exec"), reads, top=True)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Del):
            reads.add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads.add(node.target.id)
        elif (magic := _magic(node)) is not None:
            magics.append(magic)
    writes |= _advanced(tree)
    reads &= _loaded_before_bound(tree)
    deletes = _left_deleted(tree)
    opaque, blocked = False, None
    for name, arg in magics:
        if name in _OPAQUE_MAGICS or name == "<dynamic>":
            opaque = True
        elif name not in _SAFE_MAGICS:
            blocked = blocked or f"uses %{name}, which works on the live namespace"
            inner = analyse(_strip_options(name, arg))
            reads.update(inner["reads"])
            if name != "timeit":  # %timeit runs its code inside a function
                writes.update(inner["writes"])
            if name == "capture":  # ``%%capture out`` binds ``out``
                line = arg.partition("\n")[0].split()
                writes.update([w for w in line if not w.startswith("-")][:1])
            opaque = opaque or not inner["analysed"]
    out.update(
        reads=sorted(reads),
        writes=sorted(writes),
        deletes=sorted(deletes),
        star=star,
        analysed=not opaque,
        blocked=blocked,
    )
    return out


def _advanced(tree: ast.Module) -> set[str]:
    """Names the cell's own code passes to ``next(name, …)``: it advances an iterator or a
    generator, so the cell changes it (``y = next(batches)``). Calls inside functions and
    lambdas the cell defines are not counted, as for every other write."""
    found: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "next"
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            found.add(node.args[0].id)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _loaded_before_bound(tree: ast.Module) -> set[str]:
    """Names some top-level statement may load before the cell has certainly bound them.

    A name counts as bound once a top-level ``=``, ``import``, ``def`` or ``class`` (not inside
    an ``if``, loop or ``try``) has bound it; a load in that statement itself still counts, so
    ``x = x + 1`` reads ``x`` and ``x = 2; y = x`` does not.
    """
    bound: set[str] = set()
    loaded: set[str] = set()
    for stmt in tree.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                node = node.target
            elif not isinstance(node, ast.Name) or isinstance(node.ctx, ast.Store):
                continue
            if node.id not in bound:
                loaded.add(node.id)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and getattr(stmt, "value", None):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            bound.update(t.id for t in _flat(targets) if isinstance(t, ast.Name))
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.partition(".")[0] for a in stmt.names)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
    return loaded


def _left_deleted(tree: ast.Module) -> set[str]:
    """Names a top-level ``del`` removes and no later statement of the cell binds again."""
    last: dict[str, bool] = {}
    for stmt in tree.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                last[node.id] = False
        if isinstance(stmt, ast.Delete):
            last.update((t.id, True) for t in stmt.targets if isinstance(t, ast.Name))
    return {name for name, deleted in last.items() if deleted}


def _flat(targets: Sequence[ast.AST]) -> Iterator[ast.AST]:
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flat(t.elts)
        elif isinstance(t, ast.Starred):
            yield from _flat([t.value])
        else:
            yield t


def _scope_reads(table: symtable.SymbolTable, reads: set, top: bool) -> None:
    """Names loaded from the module namespace: anywhere at top level, and the globals of nested
    functions, lambdas, comprehensions and class bodies (their own locals and parameters are
    not the namespace's)."""
    for symbol in table.get_symbols():
        if symbol.is_referenced() and (top or symbol.is_global()):
            reads.add(symbol.get_name())
    for child in table.get_children():
        _scope_reads(child, reads, top=False)


def _magic(node: ast.AST) -> tuple[str, str] | None:
    """``(name, code)`` of a ``get_ipython().run_line_magic/run_cell_magic(...)`` call."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in ("run_line_magic", "run_cell_magic"):
        return None
    args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
    if not args or not isinstance(args[0], str):
        return ("<dynamic>", "")
    code = args[-1] if isinstance(args[-1], str) else ""
    if node.func.attr == "run_cell_magic" and len(args) >= 3:
        line = args[1] if isinstance(args[1], str) else ""
        return (args[0], code if args[0] != "capture" else line + "\n" + code)
    return (args[0], code)


def _strip_options(name: str, arg: str) -> str:
    """The Python code of a code-running magic's argument, its leading ``-x`` options dropped."""
    if name == "capture":
        return arg.partition("\n")[2]
    words = arg.split(" ")
    while words and words[0].startswith("-"):
        flag = words.pop(0)
        if flag in ("-n", "-r", "-p", "-T", "-D", "-s", "-l") and words:
            words.pop(0)
    return " ".join(words)


def _module_writes(node: ast.AST, writes: set, star: list) -> None:
    """Names ``node`` (at module scope) binds or mutates; nested scopes only through ``global``."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        writes.add(node.name)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Global):
                writes.update(inner.names)
        outer = node.decorator_list + (
            node.bases + [k.value for k in node.keywords]
            if isinstance(node, ast.ClassDef)
            else node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        )
        for child in outer:
            _module_writes(child, writes, star)
        return
    if isinstance(node, ast.Lambda):
        for child in node.args.defaults:
            _module_writes(child, writes, star)
        return
    targets: Sequence[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [node.target] if not isinstance(node, ast.AnnAssign) or node.value else []
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    elif isinstance(node, ast.NamedExpr):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = node.targets
    elif isinstance(node, ast.ExceptHandler) and node.name:
        writes.add(node.name)
    elif isinstance(node, _MATCH_NAMES) and node.name:
        writes.add(node.name)
    elif isinstance(node, _MATCH_REST) and node.rest:
        writes.add(node.rest)
    elif isinstance(node, ast.Import):
        writes.update(a.asname or a.name.partition(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom):
        for a in node.names:
            if a.name == "*":
                star.append("." * node.level + (node.module or ""))
            else:
                writes.add(a.asname or a.name)
    for target in targets:
        writes.update(_target_names(target))
    for inner_node in ast.iter_child_nodes(node):
        _module_writes(inner_node, writes, star)


def _target_names(target: ast.AST) -> set[str]:
    """The names an assignment target binds, or mutates when it is ``x[…]`` / ``x.attr``."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    while isinstance(target, (ast.Attribute, ast.Subscript)):
        target = target.value
    return {target.id} if isinstance(target, ast.Name) else set()
