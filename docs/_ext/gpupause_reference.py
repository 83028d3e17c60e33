"""The reference pages, generated from the code each time the docs are built.

Nothing here is written by hand: the settings come from the traitlets of every configurable
class of the package (their help text is the documentation), the REST API from the OpenAPI
document the server serves, the events from ``EventType`` and the jupyter_events schema, the
CLI from its subcommands and exit codes. Sphinx runs ``write_all`` on ``builder-inited``; the
files land in ``docs/reference/_generated/`` (ignored by git), which the pages of
``docs/reference/`` include. tests/test_docs_reference.py calls the same functions, without
Sphinx, to check that nothing is left out.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from traitlets import Dict, Enum, HasTraits, List, TraitError, TraitType, Type
from traitlets.config import Configurable
from traitlets.traitlets import ValidateHandler
from traitlets.utils.importstring import import_item

PACKAGE = "jupyter_gpu_pause"
DOCS = Path(__file__).resolve().parent.parent
GENERATED = DOCS / "reference" / "_generated"
_ROOT = Path(importlib.import_module(PACKAGE).__file__ or "").parent
API_YAML = _ROOT / "server" / "web" / "api.yaml"
EVENT_SCHEMA = _ROOT / "server" / "state" / "events" / "lifecycle.yaml"

# The functions that check settings at start beyond traitlets (the class whose settings they
# check, their module and qualified name, the name the settings object has there): a setting
# they read is "checked at start".
START_CHECKS = [
    ("GpuPauseApp", "jupyter_gpu_pause.server.app", "GpuPauseApp._check_configuration", "self"),
    ("GpuPauseApp", "jupyter_gpu_pause.server.config.startup", "check_storage", "settings"),
    ("HubServiceApp", "jupyter_gpu_pause.hubservice.app", "HubServiceApp._checked", "self"),
]
# Values a @validate handler is tried with, by trait kind, to show the message a bad value
# gets (every handler refuses the first of these that it refuses at all).
_PROBES: dict[str, list[Any]] = {
    "number": [-1, 0],
    "text": ["ftp://example"],
    "list": [["ftp://example"]],
    "dict": [{"NVIDIA X": -1.0}],
}


# -- text ----------------------------------------------------------------------------------------
_CODE = re.compile(r"(``?)(.+?)\1", re.S)
_DOC_LINK = re.compile(r"docs/([\w./-]+?\.md)(#[\w-]+)?")
_MD_SPECIAL = re.compile(r"([\\*_\[\]<>|#])")


def _link_docs(text: str, escape) -> str:
    """``docs/x.md`` mentions as links to the page (relative to a page of reference/), where
    the page exists; the text between them through ``escape``."""
    out, at = [], 0
    for m in _DOC_LINK.finditer(text):
        out.append(escape(text[at : m.start()]))
        page, anchor = m.group(1), m.group(2) or ""
        if (DOCS / page).is_file():
            out.append(f"[](../{page}{anchor})")  # MyST writes the page's title
        else:
            out.append(f"`docs/{page}{anchor}`")
        at = m.end()
    out.append(escape(text[at:]))
    return "".join(out)


def md(text: str | None, table: bool = False) -> str:
    """Plain text (a help string, a docstring, an OpenAPI description) as Markdown: code spans
    (``x`` or `x`) kept, everything else escaped, ``docs/*.md`` linked. ``table``: one line,
    pipes escaped, for a table cell."""
    text = (text or "").strip()
    if table:
        text = " ".join(text.split())

    def escape(s: str) -> str:
        s = _MD_SPECIAL.sub(r"\\\1", s)
        return s

    out, at = [], 0
    for m in _CODE.finditer(text):
        out.append(_link_docs(text[at : m.start()], escape))
        code = m.group(2)
        fence = "``" if "`" in code else "`"
        pad = " " if code.startswith("`") or code.endswith("`") else ""
        out.append(f"{fence}{pad}{code}{pad}{fence}")
        at = m.end()
    out.append(_link_docs(text[at:], escape))
    result = "".join(out)
    if table:
        result = re.sub(r"(?<!\\)\|", r"\\|", result)
    return result


def code(value: str) -> str:
    """A value as one code span, safe in a table cell."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n")[0].replace("\n", " ")


def label(*parts: str) -> str:
    """A Sphinx label (lower case, as Sphinx stores them)."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts)


# -- settings ------------------------------------------------------------------------------------
@dataclass
class Setting:
    cls: type  # the class whose section sets it (c.<cls>.<name>)
    name: str
    trait: TraitType
    group: str  # the source's "# -- group ---" comment above it, or ""
    sections: list[str] = field(default_factory=list)  # subclasses that read it too

    @property
    def help(self) -> str:
        return self.trait.help or ""


def package_modules(prefix: str = PACKAGE) -> Iterator[Any]:
    """Every module of the package (the prebuilt labextension is data, not code)."""
    root = importlib.import_module(prefix)
    yield root
    for info in pkgutil.walk_packages(root.__path__, f"{prefix}."):
        if ".labextension" not in info.name:
            yield importlib.import_module(info.name)


def package_classes() -> list[type]:
    """Every ``HasTraits`` class defined in the package, in module order."""
    seen: dict[type, None] = {}
    for module in package_modules():
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, HasTraits)
                and obj.__module__ == module.__name__
            ):
                seen.setdefault(obj, None)
    return list(seen)


def ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == PACKAGE


def defined_by(cls: type, name: str) -> type:
    """The class of ``cls``'s MRO that defines trait ``name``."""
    for base in cls.__mro__:
        if isinstance(base.__dict__.get(name), TraitType):
            return base
    raise LookupError(f"{cls.__name__}.{name}")


def own_config_traits(cls: type) -> dict[str, TraitType]:
    """The settings a class brings itself: config=True traits defined by it or by a mixin of
    ours that is not a configurable (GpuPauseSettings), and by no class outside the package
    (JupyterApp's config_file_name, redefined by HubServiceApp, stays Jupyter's)."""
    found = {}
    for name, trait in cls.class_traits(config=True).items():
        owner = defined_by(cls, name)
        foreign = any(
            name in vars(base) for base in cls.__mro__ if not ours(base) and base is not object
        )
        mixin = ours(owner) and not issubclass(owner, Configurable)
        if not foreign and (owner is cls or mixin):
            found[name] = trait
    return found


def _source_order(cls: type) -> tuple[dict[str, int], dict[str, str]]:
    """Each trait's line and ``# -- group`` in the source of the classes that define it."""
    order: dict[str, int] = {}
    groups: dict[str, str] = {}
    line_no = 0
    for base in reversed(cls.__mro__):
        if not ours(base):
            continue
        try:
            lines = inspect.getsource(base).splitlines()
        except (OSError, TypeError):
            continue
        group = ""
        for line in lines:
            line_no += 1
            if m := re.match(r"\s+# -- (.+?) -+\s*$", line):
                group = m.group(1).strip()
            elif m := re.match(r"    (\w+)\s*(?::[^=]+)?=\s*[\w.]+\(", line):
                order.setdefault(m.group(1), line_no)
                groups.setdefault(m.group(1), group)
    return order, groups


def settings_classes() -> list[type]:
    """The configurable classes of the package with settings of their own, outside the CLI
    (whose options are the CLI page's): GpuPauseApp first, then the rest by module."""
    found = [
        c
        for c in package_classes()
        if issubclass(c, Configurable)
        and not c.__module__.startswith(f"{PACKAGE}.cli")
        and own_config_traits(c)
    ]
    found.sort(
        key=lambda c: (
            c.__name__ != "GpuPauseApp",
            c.__module__.startswith(f"{PACKAGE}.hubservice"),  # the Hub's service: last
            c.__module__,
            c.__name__,
        )
    )
    return found


def settings() -> list[Setting]:
    """Every setting of the package, class by class, in the order of the source."""
    classes = [c for c in package_classes() if issubclass(c, Configurable)]
    out = []
    for cls in settings_classes():
        order, groups = _source_order(cls)
        traits = own_config_traits(cls)
        subclasses = sorted(c.__name__ for c in classes if c is not cls and issubclass(c, cls))
        for name in sorted(traits, key=lambda n: (order.get(n, 10**9), n)):
            out.append(Setting(cls, name, traits[name], groups.get(name, ""), subclasses))
    return out


def _validators(cls: type) -> dict[str, Any]:
    """trait name -> the function of its ``@validate`` handler, over the MRO."""
    found: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        for value in vars(base).values():
            if isinstance(value, ValidateHandler):
                for name in value.trait_names:
                    found[name] = value.func
    return found


def _start_checked() -> set[tuple[str, str]]:
    """(class, setting) read by the configuration checks that run at start (``START_CHECKS``)."""
    names: set[tuple[str, str]] = set()
    for owner, module, qualname, var in START_CHECKS:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        source = inspect.getsource(obj)
        names.update((owner, n) for n in re.findall(rf"\b{var}\.(\w+)", source))
    return names


def _kind(trait: TraitType) -> str:
    if isinstance(trait, List):
        return "list"
    if isinstance(trait, Dict):
        return "dict"
    if isinstance(trait, (Enum, Type)):
        return "other"
    default = trait.default_value
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return "number"
    if isinstance(default, str) or default is None:
        return "text"
    return "other"


def refusal(cls: type, trait: TraitType, func) -> str | None:
    """The message the ``@validate`` handler ``func`` gives a bad value (tried with a few
    values of the trait's kind), as the admin sees it at start; None if none is refused."""
    dummy = type(cls.__name__, (), {})()
    for value in _PROBES.get(_kind(trait), []):
        try:
            func(dummy, {"trait": trait, "value": value, "owner": dummy})
        except TraitError as e:
            return str(e)
        except Exception:
            return None
    return None


def type_text(trait: TraitType) -> str:
    """What a setting takes, in words."""
    if isinstance(trait, Enum):
        return "one of " + ", ".join(code(repr(v)) for v in trait.values or [])
    if isinstance(trait, Type):
        klass = trait.klass if isinstance(trait.klass, str) else trait.klass.__qualname__
        text = f"a subclass of {code(str(klass).rsplit('.', 1)[-1])}, as an import string"
        names = getattr(trait, "names", None)  # ProviderClass: short names too
        if names:
            text += ", or one of " + ", ".join(code(repr(n)) for n in import_item(names))
        return text
    kind = type(trait).__name__
    inner = getattr(trait, "_trait", None) or getattr(trait, "_value_trait", None)
    if inner is not None:
        kind += f" of {type(inner).__name__}"
    if trait.allow_none:
        kind += " or None"
    return code(kind)


def default_text(cls: type, name: str, trait: TraitType) -> str:
    generator = cls._all_trait_default_generators.get(name)  # type: ignore[attr-defined]
    if getattr(generator, "__self__", None) is not trait:
        return "computed at start (the help above says how)"
    value = trait.default()
    if isinstance(trait, Type) and not isinstance(value, str) and value is not None:
        value = f"{value.__module__}.{value.__qualname__}"
    return code(repr(value))


def check_text(setting: Setting, validators, start_checked: set[tuple[str, str]]) -> str:
    """How a bad value of the setting is caught."""
    cls, name, trait = setting.cls, setting.name, setting.trait
    func = validators.get(name)
    if func is not None:
        message = refusal(cls, trait, func)
        example = f" such as {code(message)}" if message else " naming the setting"
        return f"at start: a bad value is refused with a message{example}"
    if (cls.__name__, name) in start_checked:
        return "at start, before anything is served: a bad value is refused, naming the setting"
    if isinstance(trait, (Enum, Type)):
        return "at start: any other value is refused"
    return "its type, at start"


def settings_markdown() -> str:
    """The settings page's body: each class, its groups, each setting."""
    start_checked = _start_checked()
    lines: list[str] = []
    current: type | None = None
    group: str | None = None
    validators: dict[str, Any] = {}
    for s in settings():
        if s.cls is not current:
            current, group, validators = s.cls, None, _validators(s.cls)
            lines += [f"({label('settings', s.cls.__name__)})=", f"## `{s.cls.__name__}`", ""]
            lines += [md(first_paragraph(s.cls.__doc__)), ""]
            where = f"`c.{s.cls.__name__}.<name>` in a Jupyter config file"
            if s.sections:
                where += ", or the section of the subclass in use (" + ", ".join(
                    f"`c.{n}`" for n in s.sections
                )
                where += ")"
            lines += [f"Set as {where}.", ""]
        level = "###"
        if s.group:
            level = "####"
            if s.group != group:
                group = s.group
                lines += [f"### {md(s.group[:1].upper() + s.group[1:])}", ""]
        lines += [f"({label('setting', s.cls.__name__, s.name)})=", f"{level} `{s.name}`", ""]
        lines += [md(s.help), ""]
        lines += [
            f"- **Set:** `c.{s.cls.__name__}.{s.name}`",
            f"- **Type:** {type_text(s.trait)}",
            f"- **Default:** {default_text(s.cls, s.name, s.trait)}",
            f"- **Checked:** {check_text(s, validators, start_checked)}",
            "",
        ]
    return "\n".join(lines)


# -- REST ----------------------------------------------------------------------------------------
METHODS = ("get", "put", "post", "delete", "patch")


def load_yaml(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any], list]]:
    """(path, METHOD, operation, path-level parameters) of every operation, in the order of
    the document."""
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method.upper(), item[method], item.get("parameters", [])


def _deref(spec: dict[str, Any], obj: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The object a ``$ref`` points to (and its name), else the object itself."""
    ref = obj.get("$ref") if isinstance(obj, dict) else None
    if not ref:
        return obj, None
    node: Any = spec
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node, ref.rsplit("/", 1)[-1]


def _schema_type(spec: dict[str, Any], schema: dict[str, Any] | None) -> str:
    """A short name for a schema: a component's name (linked), or its JSON type."""
    if not schema:
        return ""
    node, name = _deref(spec, schema)
    if name:
        return f"{{ref}}`{name} <{label('rest-schema', name)}>`"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            parts = [_schema_type(spec, alt) for alt in node[key]]
            return (" and " if key == "allOf" else " or ").join(p for p in parts if p)
    if "enum" in node:
        return "one of " + ", ".join(code(json_text(v)) for v in node["enum"])
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    words = []
    for k in kinds:
        if k == "array":
            items = _schema_type(spec, node.get("items"))
            words.append(f"array of {items}" if items else "array")
        elif k == "object" and node.get("properties"):
            words.append("object (" + ", ".join(f"`{p}`" for p in node["properties"]) + ")")
        elif k:
            words.append(str(k))
    return " or ".join(words)


def json_text(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _response_schema(spec: dict[str, Any], response: dict[str, Any]) -> str:
    node, _ = _deref(spec, response)
    content = node.get("content") or {}
    for media, body in content.items():
        schema = (body or {}).get("schema")
        return _schema_type(spec, schema) if schema else f"`{media}`"
    return "(no body)"


def _fields_table(spec: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """A table of an object schema's properties."""
    node, _ = _deref(spec, schema)
    props = node.get("properties") or {}
    if not props:
        return ["No fields (`{}` or no body).", ""]
    required = set(node.get("required") or [])
    rows = ["| field | type | required | description |", "|---|---|---|---|"]
    for name, prop in props.items():
        prop_node, _ = _deref(spec, prop)
        desc = (prop or {}).get("description") or prop_node.get("description")
        rows.append(
            f"| `{name}` | {_schema_type(spec, prop)} | {'yes' if name in required else ''} "
            f"| {md(desc, table=True)} |"
        )
    return [*rows, ""]


def rest_markdown(spec: dict[str, Any] | None = None) -> str:
    """The REST page's body: the rules every route follows, each operation, each schema."""
    spec = spec or load_yaml(API_YAML)
    info = spec["info"]
    lines = [md(info.get("summary")), "", md(info.get("description")), ""]
    current_tag = None
    tags = {t["name"]: t.get("description", "") for t in spec.get("tags", [])}
    for path, method, op, shared in sorted(
        operations(spec),
        key=lambda o: (
            list(tags).index((o[2].get("tags") or [""])[0])
            if (o[2].get("tags") or [""])[0] in tags
            else len(tags)
        ),
    ):
        tag = (op.get("tags") or [""])[0]
        if tag != current_tag:
            current_tag = tag
            lines += [f"## {md(tag.capitalize() or 'Other')}", "", md(tags.get(tag)), ""]
        lines += [f"({label('rest', method, path)})=", f"### `{method} {path}`", ""]
        lines += [md(op.get("summary")), ""]
        if op.get("description"):
            lines += [md(op["description"]), ""]
        if op.get("security"):
            schemes = ", ".join(f"`{name}`" for req in op["security"] for name in req)
            lines += [f"Authentication: {schemes} (see below).", ""]
        params = [_deref(spec, p)[0] for p in [*shared, *(op.get("parameters") or [])]]
        if params:
            lines += ["| parameter | in | required | description |", "|---|---|---|---|"]
            for p in params:
                lines.append(
                    f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else ''} "
                    f"| {md(p.get('description'), table=True)} |"
                )
            lines.append("")
        if "requestBody" in op:
            body, _ = _deref(spec, op["requestBody"])
            needed = "required" if body.get("required") else "optional"
            lines += [f"Request body ({needed}, JSON):", ""]
            if body.get("description"):
                lines += [md(body["description"]), ""]
            schema = next(iter((body.get("content") or {}).values()), {}).get("schema", {})
            lines += _fields_table(spec, schema)
        lines += ["| status | answer | body |", "|---|---|---|"]
        for status, response in op["responses"].items():
            node, _ = _deref(spec, response)
            lines.append(
                f"| {status} | {md(node.get('description'), table=True)} "
                f"| {_response_schema(spec, response)} |"
            )
        lines.append("")
    lines += _errors_markdown(spec)
    lines += _security_markdown(spec)
    lines += _schemas_markdown(spec)
    return "\n".join(lines)


def _errors_markdown(spec: dict[str, Any]) -> list[str]:
    lines = [f"({label('rest-errors')})=", "## Errors and their reasons", ""]
    lines += [
        "Every refusal is an {ref}`Error <rest-schema-error>`: a `message` for people and a "
        "`reason` for programs (in backticks below). The routes above share these answers.",
        "",
        "| status | answer | meaning and reasons |",
        "|---|---|---|",
    ]
    used: dict[str, set[str]] = {}  # response name -> the statuses it answers
    for _path, _method, op, _shared in operations(spec):
        for status, response in op["responses"].items():
            used.setdefault(_deref(spec, response)[1] or "", set()).add(str(status))
    error = _schema_type(spec, {"$ref": "#/components/schemas/Error"})
    for name, response in spec["components"]["responses"].items():
        node, _ = _deref(spec, response)
        if _response_schema(spec, node) != error:
            continue
        text = node.get("description") or ""
        statuses = sorted(used.get(name) or set(re.findall(r"\b([45]\d\d)\b", text)))
        lines.append(f"| {', '.join(statuses)} | `{name}` | {md(text, table=True)} |")
    return [*lines, ""]


def _security_markdown(spec: dict[str, Any]) -> list[str]:
    lines = ["## Authentication", "", "| scheme | where | value |", "|---|---|---|"]
    for name, scheme in spec["components"].get("securitySchemes", {}).items():
        where = f"{scheme.get('in', '')} `{scheme.get('name', '')}`"
        lines.append(f"| `{name}` | {where} | {md(scheme.get('description'), table=True)} |")
    return [*lines, ""]


def _schemas_markdown(spec: dict[str, Any]) -> list[str]:
    lines = ["## Schemas", ""]
    for name, schema in spec["components"]["schemas"].items():
        lines += [f"({label('rest-schema', name)})=", f"### `{name}`", ""]
        if schema.get("description"):
            lines += [md(schema["description"]), ""]
        if schema.get("properties"):
            lines += _fields_table(spec, schema)
        elif schema.get("enum") or schema.get("type"):
            lines += [_schema_type(spec, schema), ""]
    return lines


# -- events --------------------------------------------------------------------------------------
def event_types() -> list[tuple[str, str]]:
    """(value, description) of every ``EventType``, the description from the comment on its
    line in the enum's source (the enum declares each once, with its comment)."""
    from jupyter_gpu_pause.server.state.event_types import EventType

    comments = dict(
        re.findall(r'^\s+[A-Z_]+ = "(\w+)"\s*#\s*(.+?)\s*$', inspect.getsource(EventType), re.M)
    )
    return [(t.value, comments.get(t.value, "")) for t in EventType]


def events_markdown(schema: dict[str, Any] | None = None) -> str:
    schema = schema or load_yaml(EVENT_SCHEMA)
    lines = [
        f"**Schema:** `{schema['$id']}`, version `{schema['version']}`, registered with "
        f"jupyter_events ({md(schema.get('title'))}).",
        "",
        md(schema.get("description")),
        "",
        f"({label('events-fields')})=",
        "## Fields",
        "",
        "| field | type | required | description |",
        "|---|---|---|---|",
    ]
    required = set(schema.get("required") or [])
    for name, prop in schema["properties"].items():
        kind = prop.get("type")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        lines.append(
            f"| `{name}` | {kind} | {'yes' if name in required else ''} "
            f"| {md(prop.get('description'), table=True)} |"
        )
    lines += ["", f"({label('events-types')})=", "## Event types", ""]
    lines += [
        "The value of `type`. The list is closed: the schema's `type` is an enum of exactly these.",
        "",
        "| type | what happened |",
        "|---|---|",
    ]
    for value, description in event_types():
        lines.append(f"| `{value}` | {md(description, table=True)} |")
    return "\n".join([*lines, ""])


# -- CLI -----------------------------------------------------------------------------------------
@dataclass
class Option:
    flag: str  # --name, or --name=<value>
    help: str


@dataclass
class Subcommand:
    name: str
    summary: str  # the root command's line for it
    cls: type
    usage: str
    description: str
    options: list[Option]
    common: bool  # takes --url, --token, --json


def _trait_for(cls: type, target: str) -> TraitType | None:
    """The trait an alias names (``Class.trait``), among the command's classes."""
    owner, _, name = target.rpartition(".")
    candidates = [*cls.__mro__, *(c for k in getattr(cls, "classes", []) for c in k.__mro__)]
    for c in candidates:
        if c.__name__ == owner and name in getattr(c, "class_traits", lambda: {})():
            return c.class_traits()[name]
    return None


def _dash(name: str) -> str:
    return f"-{name}" if len(name) == 1 else f"--{name}"


def _options(cls: type, skip_aliases: dict, skip_flags: dict) -> list[Option]:
    out = []
    for key, target in (getattr(cls, "aliases", None) or {}).items():
        if skip_aliases.get(key) == target:
            continue
        names = key if isinstance(key, tuple) else (key,)
        trait = _trait_for(cls, target)
        flag = ", ".join(f"{_dash(n)}=<value>" for n in names)
        out.append(Option(flag, (trait.help if trait is not None else "") or ""))
    for key, (_config, help_) in (getattr(cls, "flags", None) or {}).items():
        if key in skip_flags and skip_flags[key][1] == help_:
            continue
        names = key if isinstance(key, tuple) else (key,)
        out.append(Option(", ".join(_dash(n) for n in names), help_))
    return out


def subcommands() -> list[Subcommand]:
    from jupyter_core.application import base_aliases, base_flags

    from jupyter_gpu_pause.cli.app import SUBCOMMANDS, GpuPauseCli
    from jupyter_gpu_pause.cli.base import COMMON_ALIASES, COMMON_FLAGS, Command

    out = []
    for name, (target, summary) in GpuPauseCli.subcommands.items():
        cls = import_item(target)
        common = issubclass(cls, Command)
        skip_a, skip_f = (COMMON_ALIASES, COMMON_FLAGS) if common else (base_aliases, base_flags)
        args = getattr(cls, "args", "") if common else ""
        usage = f"jupyter gpu-pause {name} {args} [options]".replace("  ", " ")
        out.append(
            Subcommand(
                name,
                SUBCOMMANDS[name][1] if name in SUBCOMMANDS else summary,
                cls,
                usage,
                str(getattr(cls, "description", "") or ""),
                _options(cls, skip_a, skip_f),
                common,
            )
        )
    return out


def exit_codes() -> list[tuple[int, str, str]]:
    """(code, NAME, meaning) of every exit code, the meaning from its comment in the source."""
    from jupyter_gpu_pause.cli import errors

    source = inspect.getsource(errors)
    found = []
    for m in re.finditer(r"^([A-Z][A-Z_]*) = (\d+)(?:\s*#\s*(.+?))?\s*$", source, re.M):
        name, value, comment = m.group(1), int(m.group(2)), m.group(3)
        found.append((value, name, comment or name.replace("_", " ").lower()))
    return found


def cli_markdown() -> str:
    from jupyter_core.application import base_aliases, base_flags

    from jupyter_gpu_pause.cli.app import GpuPauseCli
    from jupyter_gpu_pause.cli.base import Command

    commands = subcommands()
    lines = [md(GpuPauseCli.description), "", "| command | what it does |", "|---|---|"]
    for c in commands:
        lines.append(f"| [`{c.name}`](#{label('cli', c.name)}) | {md(c.summary, table=True)} |")
    lines += ["", f"({label('cli-common-options')})=", "## Options every command takes", ""]
    lines += ["| option | meaning |", "|---|---|"]
    for row in _options(Command, base_aliases, base_flags):
        lines.append(f"| `{row.flag}` | {md(row.help, table=True)} |")
    jupyter = [f"`{_dash(k)}`" for k in [*base_aliases, *base_flags]]
    lines += ["", "And Jupyter's own: " + ", ".join(jupyter) + ".", ""]
    for c in commands:
        lines += [f"({label('cli', c.name)})=", f"## `{c.name}`", ""]
        lines += ["```text", c.usage, "```", ""]
        lines += [md(c.description or c.summary), ""]
        if c.options:
            lines += ["| option | meaning |", "|---|---|"]
            for row in c.options:
                lines.append(f"| `{row.flag}` | {md(row.help, table=True)} |")
            lines.append("")
        if c.common:
            lines += ["With the {ref}`options every command takes <cli-common-options>`.", ""]
    lines += [f"({label('cli-exit-codes')})=", "## Exit codes", ""]
    lines += ["| code | name | meaning |", "|---|---|---|"]
    for value, name, meaning in exit_codes():
        lines.append(f"| {value} | `{name}` | {md(meaning, table=True)} |")
    return "\n".join([*lines, ""])


# -- Sphinx --------------------------------------------------------------------------------------
PAGES = {
    "settings.md": settings_markdown,
    "rest.md": rest_markdown,
    "events.md": events_markdown,
    "cli.md": cli_markdown,
}


def write_all(folder: Path = GENERATED) -> list[Path]:
    """Write every generated page; a file whose text is unchanged is left alone, so Sphinx
    rebuilds only the pages that include a changed one."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PAGES.items():
        path = folder / name
        text = make().rstrip() + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _on_builder_inited(app) -> None:
    write_all(Path(app.srcdir) / "reference" / "_generated")


def setup(app) -> dict[str, Any]:
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
