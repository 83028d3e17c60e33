"""The generated reference (docs/reference/) leaves nothing out and documents everything.

The reference pages are written from the code by ``docs/_ext/gpupause_reference.py`` at each
docs build. Here the code is read on its own — every ``config=True`` trait of the package, every
operation of the OpenAPI document, every event type, every CLI subcommand and exit code — and
each must have words of its own (a help text, a summary, a comment) and appear in the page the
generator writes. A setting added without help text fails here, as does one the generator
would skip. No Sphinx build: the generator's functions are called directly.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pytest
import yaml
from traitlets import HasTraits, TraitType, Unicode
from traitlets.config import Configurable
from traitlets.utils.importstring import import_item

import jupyter_gpu_pause.server.capacity.providers as providers_module
from jupyter_gpu_pause.cli import errors as cli_errors
from jupyter_gpu_pause.cli.app import SUBCOMMANDS, GpuPauseCli
from jupyter_gpu_pause.server.state.event_types import EventType

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API_YAML = ROOT / "jupyter_gpu_pause" / "server" / "web" / "api.yaml"
EVENT_SCHEMA = ROOT / "jupyter_gpu_pause" / "server" / "state" / "events" / "lifecycle.yaml"


def _load_generator():
    """docs/_ext/gpupause_reference.py, as Sphinx loads it (docs/_ext is not a package)."""
    name = "gpupause_reference"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCS / "_ext" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def sections(page: str) -> dict[str, str]:
    """A page's ``## heading`` sections: the heading's text -> the section's text."""
    parts = re.split(r"^## (.+)$", page, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


# -- settings ------------------------------------------------------------------------------------
def config_traits() -> list[tuple[type, str, TraitType]]:
    """Every config=True trait the package defines: (the class that defines it, name, trait),
    found from the classes' own dictionaries, not through the generator's selection."""
    found = []
    for module in gen.package_modules():
        for cls in vars(module).values():
            if not (
                inspect.isclass(cls)
                and issubclass(cls, HasTraits)
                and cls.__module__ == module.__name__
            ):
                continue
            for name, value in vars(cls).items():
                if isinstance(value, TraitType) and value.metadata.get("config"):
                    found.append((cls, name, value))
    return found


def sections_of(owner: type) -> list[str]:
    """The config sections (``c.<Class>``) that read a trait defined by ``owner``: its own
    class, or, for a mixin that is not a configurable (GpuPauseSettings), the configurables
    of the package built on it."""
    if issubclass(owner, Configurable):
        return [owner.__name__]
    return sorted(
        c.__name__
        for c in gen.package_classes()
        if issubclass(c, Configurable) and issubclass(c, owner)
    )


def is_cli(cls: type) -> bool:
    return cls.__module__.startswith("jupyter_gpu_pause.cli")


def jupyter_owned(cls: type, name: str) -> bool:
    """A trait of Jupyter's that a class of ours redefines (HubServiceApp.config_file_name):
    Jupyter documents it, not us."""
    return any(name in vars(base) for base in cls.__mro__[1:] if not gen.ours(base))


def settings_problems() -> list[str]:
    """What the settings page lacks: every setting outside the CLI with its help text, under
    every section that reads it."""
    page = gen.settings_markdown()
    problems = []
    for cls, name, trait in config_traits():
        if is_cli(cls) or jupyter_owned(cls, name):
            continue
        if not (trait.help or "").strip():
            problems.append(f"{cls.__name__}.{name} has no help text")
        for section in sections_of(cls):
            if f"`c.{section}.{name}`" not in page:
                problems.append(f"c.{section}.{name} is not on the settings page")
    return problems


def test_every_setting_has_help_and_is_on_the_settings_page():
    # Given every config=True trait of the package, outside the CLI
    # When the settings page is generated
    # Then each has a help text and appears under its c.<Class> section
    assert settings_problems() == []


def test_a_setting_added_without_help_fails(monkeypatch):
    # Given a configurable with a setting that has no help text, added to a module
    class Undocumented(Configurable):
        hidden_knob = Unicode("").tag(config=True)

    Undocumented.__module__ = providers_module.__name__
    monkeypatch.setattr(providers_module, "Undocumented", Undocumented, raising=False)
    # When the reference is checked
    problems = settings_problems()
    # Then the check names it
    assert "Undocumented.hidden_knob has no help text" in problems


def test_the_settings_of_gpupauseapp_are_all_there():
    # Given the settings GpuPauseApp takes
    from jupyter_gpu_pause.server.app import GpuPauseApp
    from jupyter_gpu_pause.server.config.settings import GpuPauseSettings

    ours = set(GpuPauseSettings.class_own_traits(config=True))
    # When the generator lists them
    listed = {s.name for s in gen.settings() if s.cls is GpuPauseApp}
    # Then it lists exactly those (none of ExtensionApp's or JupyterApp's)
    assert listed == ours
    assert "open_browser" not in listed and "log_level" not in listed


def test_validated_settings_say_so():
    # Given the settings that a @validate handler checks
    page = gen.settings_markdown()
    for s in gen.settings():
        validators = gen._validators(s.cls)
        if s.name not in validators:
            continue
        # Then their entry says the check and shows the message a bad value gets
        entry = page.split(f"`c.{s.cls.__name__}.{s.name}`", 1)[1].split("\n\n", 1)[0]
        assert "a bad value is refused with a message such as" in entry, s.name


# -- REST ----------------------------------------------------------------------------------------
def rest_operations() -> list:
    spec = yaml.safe_load(API_YAML.read_text(encoding="utf-8"))
    return [
        pytest.param(path, method.upper(), op, id=f"{method.upper()} {path}")
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if method in ("get", "put", "post", "delete", "patch")
    ]


@pytest.fixture(scope="module")
def rest_page() -> str:
    return gen.rest_markdown()


@pytest.mark.parametrize("path,method,op", rest_operations())
def test_every_rest_operation_is_described_and_on_the_rest_page(path, method, op, rest_page):
    # Given an operation of the OpenAPI document
    # Then it has a summary or a description, and the REST page has its section
    assert (op.get("summary") or op.get("description") or "").strip()
    assert f"### `{method} {path}`" in rest_page
    # And every answer it gives is listed with its status
    section = rest_page.split(f"### `{method} {path}`", 1)[1].split("\n### ", 1)[0]
    for status in op["responses"]:
        assert f"\n| {status} | " in section, (method, path, status)


def test_every_schema_and_error_answer_is_on_the_rest_page(rest_page):
    spec = yaml.safe_load(API_YAML.read_text(encoding="utf-8"))
    for name in spec["components"]["schemas"]:
        assert f"### `{name}`" in rest_page, name
    for name, response in spec["components"]["responses"].items():
        error = "Error" in str(response.get("content", {}))
        assert not error or f"| `{name}` |" in rest_page, name


# -- events --------------------------------------------------------------------------------------
def test_every_event_type_has_a_description_on_the_events_page():
    # Given the event types the server declares, and the schema it registers
    page = gen.events_markdown()
    described = dict(gen.event_types())
    schema = yaml.safe_load(EVENT_SCHEMA.read_text(encoding="utf-8"))
    # Then every type has words of its own (the comment on its line in EventType) and a row
    for t in EventType:
        assert described.get(t.value, "").strip(), f"EventType.{t.name} has no comment"
        assert f"| `{t.value}` | " in page, t.value
    # And the page's types are the schema's, and every field of the schema is described
    assert [v for v, _ in gen.event_types()] == schema["properties"]["type"]["enum"]
    for name, prop in schema["properties"].items():
        assert (prop.get("description") or "").strip(), name
        assert f"| `{name}` | " in page, name


# -- CLI -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_sections() -> dict[str, str]:
    return sections(gen.cli_markdown())


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_subcommand_is_on_the_cli_page_with_its_help(name, cli_sections):
    # Given a subcommand of `jupyter gpu-pause`
    cls = import_item(GpuPauseCli.subcommands[name][0])
    summary = SUBCOMMANDS[name][1]
    description = str(getattr(cls, "description", "") or "")
    assert summary.strip() and description.strip(), name
    # Then the page lists it with its line, and gives it a section with its description
    page = gen.cli_markdown()
    assert f"| [`{name}`](#cli-{name}) | {gen.md(summary, table=True)} |" in page
    section = cli_sections[f"`{name}`"]
    assert gen.md(description) in section
    # And every option it takes beyond the common ones, each with a help text
    for option in gen.subcommands():
        if option.name == name:
            for row in option.options:
                assert row.help.strip(), (name, row.flag)
                assert f"| `{row.flag}` | " in section, (name, row.flag)


def test_every_cli_setting_has_an_option_and_help():
    # Given the traits of the CLI's commands, and what every option of a command sets
    page = gen.cli_markdown()
    commands = [import_item(target) for target, _help in GpuPauseCli.subcommands.values()]
    sets: dict[str, set[str]] = {}  # "Class.trait" -> the options that set it
    for command in commands:
        for key, target in command.aliases.items():
            sets.setdefault(target, set()).add(key)
        for key, (config, _help) in command.flags.items():
            for section, values in config.items():
                for trait in values:
                    sets.setdefault(f"{section}.{trait}", set()).add(key)
    for cls, name, trait in config_traits():
        if not is_cli(cls):
            continue
        # Then each has a help text, and an option on the page sets it
        target = f"{cls.__name__}.{name}"
        assert (trait.help or "").strip(), target
        assert sets.get(target), f"no option sets {target}"
        assert any(f"`{gen._dash(key)}" in page for key in sets[target]), target


def test_the_exit_codes_table_is_complete():
    # Given the exit codes the CLI declares
    codes = {
        name: value
        for name, value in vars(cli_errors).items()
        if name.isupper() and isinstance(value, int) and not name.startswith("_")
    }
    table = sections(gen.cli_markdown())["Exit codes"]
    # Then each has a row with its meaning
    assert {name: value for value, name, _ in gen.exit_codes()} == codes
    for value, name, meaning in gen.exit_codes():
        assert meaning.strip(), name
        assert f"| {value} | `{name}` | " in table, name


# -- the pages -----------------------------------------------------------------------------------
def test_the_reference_pages_include_what_is_generated(tmp_path):
    # When the generated files are written
    written = gen.write_all(tmp_path)
    # Then there is one per page, each included by its page under docs/reference/
    assert sorted(p.name for p in written) == sorted(gen.PAGES)
    for path in written:
        page = (DOCS / "reference" / path.name).read_text(encoding="utf-8")
        assert f"_generated/{path.name}" in page, path.name
        text = path.read_text(encoding="utf-8")
        # And no generated text speaks of the project's internal design notes
        assert "DESIGN" not in text and "§" not in text, path.name
    index = (DOCS / "reference" / "index.md").read_text(encoding="utf-8")
    for name in [*gen.PAGES, "client.md"]:
        assert f"\n{name.removesuffix('.md')}\n" in index, name


def test_the_readme_is_one_page_and_speaks_to_users():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for word in ("DESIGN", "design document", "departs from"):
        assert word not in readme, word
    # the two commands a new user runs, and CI's test command
    assert "make lab" in readme and "make test" in readme
